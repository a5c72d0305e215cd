// apps/whatif/inputs.cpp: trace reading, bucket sizes, ready curves, network fit (see inputs.h).
#include "apps/whatif/inputs.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "dist/bucketing.h"
#include "dist/tp/shard.h"
#include "dist/zero3.h"
#include "layers/models/bert.h"
#include "layers/models/models.h"

namespace tandem::whatif {

using json = nlohmann::json;

namespace {

json read_json(const std::string& path) {
  std::ifstream f(path);
  TANDEM_CHECK(f.good(), "cannot read ", path, ": give the path of a file that train_imagenet or bench_allreduce wrote");
  return json::parse(f);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct Ev {
  double ts, dur;
};

}  // namespace

MeasuredStep read_trace(const std::string& path, int skip) {
  json doc = read_json(path);
  std::vector<Ev> fwd, bwd, opt;
  std::map<int, std::vector<Ev>> buckets;
  for (const json& e : doc.at("traceEvents")) {
    if (e.value("ph", "") != "X" || e.value("pid", -1) != 0) continue;
    const std::string name = e.value("name", "");
    Ev ev{e.value("ts", 0.0) / 1e3, e.value("dur", 0.0) / 1e3};
    if (name == "forward") fwd.push_back(ev);
    else if (name == "backward") bwd.push_back(ev);
    else if (name == "optimizer.step") opt.push_back(ev);
    else if (name.rfind("allreduce bucket ", 0) == 0) buckets[std::stoi(name.substr(17))].push_back(ev);
  }
  auto by_ts = [](const Ev& a, const Ev& b) { return a.ts < b.ts; };
  for (auto* v : {&fwd, &bwd, &opt}) std::sort(v->begin(), v->end(), by_ts);
  for (auto& [k, v] : buckets) std::sort(v.begin(), v.end(), by_ts);
  TANDEM_CHECK(fwd.size() >= static_cast<size_t>(skip) + 2, path, " holds ", fwd.size(),
               " steps; the what-if model needs at least ", skip + 2, ": run more --steps with --trace");
  // A step runs from one "forward" to the next; its events are the first of each kind inside it.
  auto first_in = [](const std::vector<Ev>& v, double lo, double hi) -> const Ev* {
    for (const Ev& e : v)
      if (e.ts >= lo && e.ts < hi) return &e;
    return nullptr;
  };
  MeasuredStep m;
  std::vector<double> step, b0, b1, op;
  std::vector<std::vector<double>> ready(buckets.size());
  for (size_t i = skip; i + 1 < fwd.size(); ++i) {
    const double lo = fwd[i].ts, hi = fwd[i + 1].ts;
    const Ev* b = first_in(bwd, lo, hi);
    if (!b) continue;
    step.push_back(hi - lo);
    b0.push_back(b->ts - lo);
    b1.push_back(b->ts + b->dur - lo);
    const Ev* o = first_in(opt, lo, hi);
    op.push_back(o ? o->dur : 0);
    for (auto& [k, v] : buckets) {
      const Ev* e = first_in(v, lo, hi);
      if (e && k < static_cast<int>(ready.size())) ready[k].push_back(e->ts - lo);
    }
  }
  TANDEM_CHECK(!step.empty(), path, " has no complete step with a backward range: was it written by train_imagenet?");
  m.steps_used = static_cast<int>(step.size());
  std::vector<double> dev;  // median absolute deviation: one slow step (a log line's sync) does not count
  for (double x : step) dev.push_back(std::abs(x - median(step)));
  m.jitter_ms = 1.4826 * median(dev);
  m.step_ms = median(step), m.backward_start_ms = median(b0), m.backward_end_ms = median(b1), m.optimizer_ms = median(op);
  for (auto& r : ready) m.bucket_ready_ms.push_back(std::min(median(r), m.backward_end_ms));
  return m;
}

namespace {
// The model as the trainer builds it, without its init: train_imagenet's, or train_encoder's BERT
// with `num_classes` as the vocabulary.
ModulePtr build(const std::string& model, int num_classes) {
  if (models::is_bert_name(model))
    return std::make_shared<models::BertForMaskedLM>(models::bert_config(model, num_classes), 0, false);
  models::ModelOptions mo;
  mo.init = false;  // only the shapes are needed
  return models::create_model(model, num_classes, 0, mo);
}
}  // namespace

TpShape tp_shape(const std::string& model, int vocab, long long batch, long long seq_len) {
  TANDEM_CHECK(models::is_bert_name(model), "what-if: tensor parallelism splits an encoder's layers, and ", model,
               " is not one (bert_tiny .. bert_large)");
  const BertConfig c = models::bert_config(model, vocab);
  const dist::tp::TpLayout layout = dist::tp::bert_tp_layout(c);
  double split = 0, all = 0;
  for (auto& [name, p] : build(model, vocab)->named_parameters()) {
    all += static_cast<double>(p.numel());
    if (layout.count(name)) split += static_cast<double>(p.numel());
  }
  TpShape t;
  t.split = all > 0 ? split / all : 0;
  t.activation_bytes = 4.0 * static_cast<double>(batch) * static_cast<double>(seq_len) * static_cast<double>(c.hidden_size);
  t.layers = static_cast<int>(c.num_hidden_layers);
  return t;
}

std::vector<double> param_bytes(const std::string& model, int num_classes) {
  ModulePtr m = build(model, num_classes);
  std::vector<double> out;
  for (auto& [name, p] : m->named_parameters())
    if (p.requires_grad()) out.push_back(static_cast<double>(p.nbytes()));
  return out;
}

std::vector<Bucket> zero3_buckets(const std::string& model, int num_classes) {
  ModulePtr m = build(model, num_classes);
  const std::vector<size_t> unit_of = dist::unit_of_parameters(*m, dist::Zero3Options{});
  std::vector<size_t> bytes, unit;
  std::vector<dist::BucketKey> keys;
  size_t i = 0;
  for (auto& [name, p] : m->named_parameters()) {
    if (p.requires_grad()) {  // the reducer's parameters; a key per run of one unit, as regroup_by_unit
      keys.push_back({DType::F32, Device(), keys.empty() ? 0 : keys.back().unit + (unit_of[i] != unit.back())});
      bytes.push_back(p.nbytes()), unit.push_back(unit_of[i]);
    }
    ++i;
  }
  std::vector<Bucket> out;
  for (const auto& members : dist::assign_buckets(bytes, keys, {SIZE_MAX, SIZE_MAX, 0})) {
    Bucket b{0, 0, unit[members.front()] == 0};
    for (size_t k : members) b.bytes += static_cast<double>(bytes[k]);
    out.push_back(b);
  }
  return out;
}

std::vector<double> bucket_bytes(const std::string& model, int num_classes, double first_bucket_mb, double bucket_mb) {
  std::vector<size_t> bytes;
  for (double b : param_bytes(model, num_classes)) bytes.push_back(static_cast<size_t>(b));
  dist::BucketingOptions o{static_cast<size_t>(std::max(0.0, first_bucket_mb) * (1 << 20)),
                           static_cast<size_t>(std::max(0.0, bucket_mb) * (1 << 20))};
  std::vector<double> out;
  for (const auto& members : dist::assign_buckets(bytes, std::vector<dist::BucketKey>(bytes.size()), o)) {
    double s = 0;
    for (size_t k : members) s += static_cast<double>(bytes[k]);
    out.push_back(s);
  }
  return out;
}

double ReadyCurve::at(double x) const {
  TANDEM_CHECK(!bytes.empty(), "what-if: empty ready curve");
  if (x <= bytes.front()) return ms.front();
  for (size_t i = 1; i < bytes.size(); ++i)
    if (x <= bytes[i]) {
      const double f = bytes[i] > bytes[i - 1] ? (x - bytes[i - 1]) / (bytes[i] - bytes[i - 1]) : 1.0;
      return ms[i - 1] + f * (ms[i] - ms[i - 1]);
    }
  return ms.back();
}

ReadyCurve ready_curve(const MeasuredStep& m, const std::vector<double>& measured_buckets) {
  TANDEM_CHECK(m.bucket_ready_ms.size() == measured_buckets.size(), "the trace shows ", m.bucket_ready_ms.size(),
               " bucket all-reduces but the model and bucket sizes give ", measured_buckets.size(),
               " buckets: pass the --model, --num-classes and bucket sizes the traced run used");
  ReadyCurve c{{0}, {m.backward_start_ms}};
  double cum = 0;
  for (size_t i = 0; i < measured_buckets.size(); ++i) {
    cum += measured_buckets[i];
    c.bytes.push_back(cum);
    c.ms.push_back(std::max(c.ms.back(), m.bucket_ready_ms[i]));  // launches are in order: monotone
  }
  return c;
}

ReadyCurve linear_ready_curve(double total_bytes, double backward_start_ms, double backward_end_ms) {
  return ReadyCurve{{0, total_bytes}, {backward_start_ms, backward_end_ms}};
}

StepProfile make_profile(const MeasuredStep& m, const ReadyCurve& curve, const std::vector<double>& buckets,
                         long long batch_per_rank, double time_scale) {
  std::vector<Bucket> b;
  for (double x : buckets) b.push_back({x, 0});
  return make_profile(m, curve, b, batch_per_rank, time_scale);
}

StepProfile make_profile(const MeasuredStep& m, const ReadyCurve& curve, const std::vector<Bucket>& buckets,
                         long long batch_per_rank, double time_scale) {
  StepProfile p;
  p.step_ms = m.step_ms * time_scale;
  p.backward_end_ms = m.backward_end_ms * time_scale;
  p.backward_start_ms = m.backward_start_ms * time_scale;
  p.optimizer_ms = m.optimizer_ms * time_scale;
  p.jitter_ms = m.jitter_ms * time_scale;
  p.batch_per_rank = batch_per_rank;
  double cum = 0;
  for (const Bucket& b : buckets) {
    cum += b.bytes;
    p.buckets.push_back({b.bytes, std::min(curve.at(cum), m.backward_end_ms) * time_scale, b.resident});
  }
  return p;
}

Network fit_network(const std::string& bench_json, const std::string& backend) {
  json doc = read_json(bench_json);
  std::string use = backend;
  std::vector<std::pair<double, double>> pts;  // bytes, seconds
  int n = 0;
  for (const json& e : doc) {
    if (use.empty()) use = e.at("backend").get<std::string>();
    if (e.at("backend") != use) continue;
    n = e.at("ranks").get<int>();
    pts.emplace_back(e.at("bytes").get<double>(), e.at("time_us").get<double>() * 1e-6);
  }
  TANDEM_CHECK(pts.size() >= 2 && n >= 2, bench_json, " has no ", use.empty() ? "" : use + " ",
               "measurements at 2 or more ranks: run it as `mpiexec -n 2 bench_allreduce --json FILE`");
  // Weighted least squares t = a + b S with weights 1/t^2 (relative error, so the small messages
  // that fix the latency count as much as the large ones that fix the bandwidth).
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto [x, y] : pts) {
    const double w = 1 / (y * y);
    sw += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
  }
  const double slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx);
  const double intercept = (sy - slope * sx) / sw;
  TANDEM_CHECK(slope > 0, bench_json, ": the time does not grow with the message size; measure up to larger "
               "messages (--max-bytes 64M)");
  Network net;
  net.alpha_us = std::max(0.0, intercept) / (2.0 * (n - 1)) * 1e6;
  net.bandwidth_GBps = 2.0 * (n - 1) / n / slope / 1e9;
  return net;
}

}  // namespace tandem::whatif
