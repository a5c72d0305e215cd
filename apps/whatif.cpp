// apps/whatif.cpp: what-if scaling - predicted step time, throughput and scaling efficiency at
// N = 1..1024 ranks from one measured rank and a network description (model: apps/whatif/model.h).
//
//   whatif --trace t.json --metrics m.json --allreduce-json bench.json       # this machine
//   whatif --model resnet50 --step-ms 300 --bandwidth-gbit 100 --alpha-us 5  # assumed compute
//
// The step comes from a 1-rank train_imagenet --trace (and its --metrics for the model, batch and
// bucket sizes), or is assumed: --step-ms with gradients ready at a constant rate over the last
// --backward-fraction of it. --step-ms with a trace rescales the traced step to that length (the
// shape of backward from the trace, its length from elsewhere, e.g. a paper's per-GPU rate).
// Bucket sizes come from the model through dist::assign_buckets (--params-m for a model tandem does
// not have). The parameter server's partitions come from the same per-tensor sizes through
// dist::assign_partitions (whole tensors, as tandem's server holds them). Prints one table; --json
// writes it with its inputs. --measured adds each row's verdict against a measured cell (model.h's
// judge: the step time within 15 % and the exposed communication within its bound).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/whatif/inputs.h"  // defines: read_trace, bucket_bytes, ready curves, fit_network
#include "apps/whatif/model.h"   // defines: predict, the strategies and their costs
#include "core/check.h"
#include "dist/bucketing.h"  // defines: BucketingOptions (the bucket sizes' defaults)

using namespace tandem;
using namespace tandem::whatif;
using json = nlohmann::json;

namespace {

struct Args {
  std::string trace, metrics, model, allreduce_json, backend, json_out, measured, strategies = "ddp", wire = "none";
  std::string ranks = "1,2,4,8,16,32,64,128,256,512,1024";
  int num_classes = 1000, ps_servers = 0, cores = 0, skip = 2, tp = 2;
  long long batch = 0, seq_len = 0;
  double first_bucket_mb = dist::BucketingOptions{}.first_bucket_bytes / double(1 << 20),  // the layout to predict:
         bucket_mb = dist::BucketingOptions{}.bucket_bytes / double(1 << 20);           // dist/bucketing.h's defaults
  double traced_first_mb = -1, traced_bucket_mb = -1;  // the traced run's layout (-1: from --metrics)
  double jitter_ms = -1, step_ms = 0, backward_fraction = 2.0 / 3, params_m = 0;
  double alpha_us = 5, bandwidth_gbit = 100, link_gbit = 0, allreduce_efficiency = 1, host_GBps = 0, copy_GBps = 0,
         ps_efficiency = 0;
  int mtu = 1500;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

// Buckets of a model tandem does not build: --params-m million f32 parameters, cut like
// assign_buckets would cut a long run of small parameters (first bucket, then full ones).
std::vector<double> uniform_buckets(double bytes, double first_mb, double mb) {
  std::vector<double> out;
  double lim = first_mb * (1 << 20);
  while (bytes > 0) {
    out.push_back(std::min(bytes, std::max(lim, 1.0)));
    bytes -= out.back();
    lim = mb * (1 << 20);
  }
  return out;
}

// --measured: [{"ranks": 2, "step_ms": 31.5, "exposed_ms": 4.2, "strategy": "ddp"}, ...]; a cell
// without "strategy" matches every strategy of the run (the study asks one strategy per call).
json read_measured(const std::string& path) {
  std::ifstream f(path);
  TANDEM_CHECK(f.good(), "cannot read --measured ", path, ": give a JSON list of measured cells");
  json doc = json::parse(f);
  TANDEM_CHECK(doc.is_array(), "--measured ", path, " must hold a JSON list of {ranks, step_ms, exposed_ms}");
  for (const json& c : doc)
    TANDEM_CHECK(c.contains("ranks") && c.contains("step_ms"), "--measured ", path, ": every cell needs \"ranks\" "
                 "and \"step_ms\" (and \"exposed_ms\"), got ", c.dump());
  return doc;
}

const json* find_measured(const json& cells, const std::string& strategy, int ranks) {
  for (const json& c : cells)
    if (c.at("ranks").get<int>() == ranks && c.value("strategy", strategy) == strategy) return &c;
  return nullptr;
}

// Every flag, into `a`.
void add_flags(CLI::App& app, Args& a) {
  app.add_option("--trace", a.trace, "Chrome trace of a 1-rank train_imagenet run (--trace)");
  app.add_option("--metrics", a.metrics, "its --metrics JSON (model, batch, bucket sizes)");
  app.add_option("--model", a.model, "tandem model name (bucket sizes); default: from --metrics");
  app.add_option("--params-m", a.params_m, "model tandem lacks: million f32 parameters, cut into buckets");
  app.add_option("--num-classes", a.num_classes, "classes of the model's last layer")->capture_default_str();
  app.add_option("--batch", a.batch, "batch per rank (default: from --metrics)");
  app.add_option("--step-ms", a.step_ms, "1-rank step time: assumed, or the trace rescaled to it");
  app.add_option("--backward-fraction", a.backward_fraction, "no trace: the step's last part that is backward")
      ->capture_default_str();
  app.add_option("--jitter-ms", a.jitter_ms, "step-time standard deviation (default: from the trace; 0 without)");
  app.add_option("--skip", a.skip, "leading traced steps left out (warm-up)")->capture_default_str();
  app.add_option("--first-bucket-mb", a.first_bucket_mb, "first bucket of the predicted runs (MiB)")->capture_default_str();
  app.add_option("--bucket-mb", a.bucket_mb, "bucket size of the predicted runs (MiB; 0: one per parameter)")
      ->capture_default_str();
  app.add_option("--traced-first-bucket-mb", a.traced_first_mb, "first bucket of the traced run (default: --metrics)");
  app.add_option("--traced-bucket-mb", a.traced_bucket_mb, "bucket size of the traced run (default: --metrics)");
  app.add_option("--allreduce-json", a.allreduce_json, "bench_allreduce --json from the target: fits alpha and B");
  app.add_option("--backend", a.backend, "its backend (mpi/cpu, nccl/gpu; default: the first)");
  app.add_option("--alpha-us", a.alpha_us, "latency per message per hop (us)")->capture_default_str();
  app.add_option("--bandwidth-gbit", a.bandwidth_gbit, "per-rank payload bandwidth (Gbit/s)")->capture_default_str();
  app.add_option("--link-gbit", a.link_gbit, "instead of --bandwidth-gbit: the link's line rate (Gbit/s, e.g. tc's "
                 "rate), less TCP/IP and Ethernet headers at --mtu");
  app.add_option("--mtu", a.mtu, "--link-gbit's MTU (bytes)")->capture_default_str();
  app.add_option("--allreduce-efficiency", a.allreduce_efficiency, "the all-reduce's bus bandwidth over the link's "
                 "(bench_allreduce's busbw / payload rate; 1: a ring at the link's rate, NCCL)")->capture_default_str();
  app.add_option("--host-GBps", a.host_GBps, "CPU ranks: the hosts' own rate of moving bytes (bench_allreduce's busbw "
                 "with the link unlimited); the collectives' bytes at it are added to compute. 0: not counted")
      ->capture_default_str();
  app.add_option("--ps-efficiency", a.ps_efficiency, "the parameter server's push and pull alone on the link, host "
                 "work included (bench_allreduce --collective ps's busbw / payload rate). 0: not measured: link time "
                 "plus host work")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--copy-GBps", a.copy_GBps, "CPU ranks: one rank's memory-copy rate (bench_allreduce's copy_GBps); "
                 "the strategies' own per-step copies beyond the 1-rank step's are added to compute. 0: not counted")
      ->capture_default_str();
  app.add_option("--strategy", a.strategies, "comma list: ddp ddp_no_overlap zero1 zero2 zero3 tp ps")
      ->capture_default_str();
  app.add_option("--tp", a.tp, "tp: ranks per tensor-parallel group (BERT models; their layout and sizes from "
                               "--model, --num-classes as the vocabulary, --batch and --seq-len)")->capture_default_str();
  app.add_option("--seq-len", a.seq_len, "tp: tokens per sequence (default: from --metrics)");
  app.add_option("--wire", a.wire, "gradient dtype on the wire: none, bf16, fp16")
      ->check(CLI::IsMember({"none", "bf16", "fp16"}))->capture_default_str();
  app.add_option("--ps-servers", a.ps_servers, "parameter server: K servers on ranks 0..K-1 (train_imagenet's "
                 "--ps-servers; capped at the ranks); 0: a server on every rank")->capture_default_str();
  app.add_option("--cores", a.cores, "ranks share this many cores (CPU runs; 0: a device each)")->capture_default_str();
  app.add_option("--ranks", a.ranks, "comma list of rank counts")->capture_default_str();
  app.add_option("--json", a.json_out, "write the table and its inputs as JSON");
  app.add_option("--measured", a.measured, "JSON list of measured cells [{\"ranks\", \"step_ms\", \"exposed_ms\", "
                 "optional \"strategy\"}]: adds each matching row's verdict (model.h's Target)");
}

struct Inputs {
  std::vector<double> buckets;  // the predicted layout's bucket bytes
  double total = 0;             // their sum
  StepProfile prof;
  StepProfile zero3;  // prof on ZeRO-3's own buckets (inputs.h zero3_buckets); prof's for --params-m
  Network net;
};

// The profile (a trace, or an assumed step), its bucket layout and the network to predict from,
// with --metrics' defaults for what the command line left out.
Inputs read_inputs(Args& a) {
  Inputs in;
  if (!a.metrics.empty()) {
    json m = json::parse(std::ifstream(a.metrics));
    if (a.model.empty()) a.model = m.value("model", "");
    if (a.batch == 0) a.batch = m.value("batch_per_rank", 0LL);
    if (a.seq_len == 0) a.seq_len = m.value("seq_len", 0LL);
    if (m.contains("vocab_size") && a.num_classes == 1000) a.num_classes = m.at("vocab_size").get<int>();
    const json d = m.value("ddp", json::object());
    if (a.traced_first_mb < 0) a.traced_first_mb = d.value("bucketing", true) ? d.value("first_bucket_mb", 1.0) : 0;
    if (a.traced_bucket_mb < 0) a.traced_bucket_mb = d.value("bucketing", true) ? d.value("bucket_mb", 25.0) : 0;
  }
  if (a.traced_first_mb < 0) a.traced_first_mb = 1;
  if (a.traced_bucket_mb < 0) a.traced_bucket_mb = 25;
  TANDEM_CHECK(a.batch > 0, "whatif: give --batch (images per rank) or --metrics");
  TANDEM_CHECK(!a.model.empty() || a.params_m > 0, "whatif: give --model (a tandem model) or --params-m");
  auto layout = [&](double first, double mb) {
    return a.params_m > 0 ? uniform_buckets(a.params_m * 4e6, first, mb) : bucket_bytes(a.model, a.num_classes, first, mb);
  };
  in.buckets = layout(a.first_bucket_mb, a.bucket_mb);
  for (double b : in.buckets) in.total += b;
  MeasuredStep m;
  ReadyCurve curve;
  double scale = 1;
  if (!a.trace.empty()) {
    m = read_trace(a.trace, a.skip);
    curve = ready_curve(m, layout(a.traced_first_mb, a.traced_bucket_mb));
    if (a.step_ms > 0) scale = a.step_ms / m.step_ms;
  } else {
    TANDEM_CHECK(a.step_ms > 0, "whatif: give --trace (a measured rank) or --step-ms (an assumed one)");
    m.step_ms = a.step_ms;
    m.backward_end_ms = a.step_ms;  // optimizer time unknown: backward runs to the step's end
    m.backward_start_ms = a.step_ms * (1 - a.backward_fraction);
    curve = linear_ready_curve(in.total, m.backward_start_ms, m.backward_end_ms);
  }
  if (a.jitter_ms >= 0) m.jitter_ms = a.jitter_ms / scale;
  in.prof = make_profile(m, curve, in.buckets, a.batch, scale);
  in.zero3 = in.prof;
  if (a.params_m <= 0) {
    in.prof.param_bytes = param_bytes(a.model, a.num_classes);
    in.zero3 = make_profile(m, curve, zero3_buckets(a.model, a.num_classes), a.batch, scale);
  }
  in.net = Network{a.alpha_us, a.link_gbit > 0 ? tcp_payload_GBps(a.link_gbit, a.mtu) : a.bandwidth_gbit / 8,
                   a.allreduce_efficiency, a.host_GBps, a.copy_GBps, a.ps_efficiency};
  if (!a.allreduce_json.empty()) {  // alpha and bandwidth fitted; the host's and the server's rates as given
    const Network given = in.net;
    in.net = fit_network(a.allreduce_json, a.backend);
    in.net.host_GBps = given.host_GBps, in.net.copy_GBps = given.copy_GBps, in.net.ps_efficiency = given.ps_efficiency;
  }
  return in;
}

// The header lines: what is predicted from, and the table's column names.
void print_header(const Args& a, const Inputs& in) {
  std::printf("# %s: %.1f M params in %zu buckets; 1-rank step %.2f ms (backward ends at %.2f, optimizer %.2f, "
              "jitter %.2f); "
              "batch %lld/rank\n# network: alpha %.2f us, bandwidth %.3f GB/s (%.2f Gbit/s)%s\n",
              a.model.empty() ? "model" : a.model.c_str(), in.total / 4e6, in.buckets.size(), in.prof.step_ms,
              in.prof.backward_end_ms, in.prof.optimizer_ms, in.prof.jitter_ms, a.batch, in.net.alpha_us, in.net.bandwidth_GBps,
              in.net.bandwidth_GBps * 8, a.cores > 0 ? (", " + std::to_string(a.cores) + " shared cores").c_str() : "");
  if (in.net.host_GBps > 0 || in.net.copy_GBps > 0)
    std::printf("# CPU host: moves the collectives' bytes at %.3f GB/s, copies at %.3f GB/s (0: not counted); "
                "both add to compute (host_cpu_ms, copy_ms)\n", in.net.host_GBps, in.net.copy_GBps);
  if (in.prof.param_bytes.empty() && a.strategies.find("ps") != std::string::npos)
    std::printf("# ps: per-tensor sizes unknown (--params-m), so even shards are assumed: the parameter server's "
                "prediction is optimistic\n");
  std::printf("%-15s %6s %10s %10s %10s %8s %12s %10s %8s %7s\n", "strategy", "ranks", "step_ms", "comm_ms",
              "exposed_ms", "overlap", "images/s", "per_rank", "speedup", "eff");
}

// The strategy `sname` as the model takes it (tp: the BERT model's split layout).
StrategyOptions strategy_options(const Args& a, const std::string& sname) {
  StrategyOptions so{strategy_from_name(sname), a.wire == "none" ? 1.0 : 0.5, a.ps_servers, a.cores};
  if (so.strategy == Strategy::Tp) {
    TANDEM_CHECK(a.seq_len > 0, "whatif: --strategy tp needs --seq-len (or a train_encoder --metrics)");
    const TpShape t = tp_shape(a.model, a.num_classes, a.batch, a.seq_len);
    so.tp = a.tp, so.tp_split = t.split, so.tp_activation_bytes = t.activation_bytes, so.tp_layers = t.layers;
  }
  return so;
}

// One row of the table: the prediction of `so` at `ranks`, printed, and judged against a measured
// cell when --measured has one.
json predict_row(const Inputs& in, const std::string& sname, const StrategyOptions& so, int ranks,
                 const json& measured) {
  const Prediction p = predict(so.strategy == Strategy::Zero3 ? in.zero3 : in.prof, in.net, so, ranks);
  std::printf("%-15s %6d %10.2f %10.2f %10.2f %7.0f%% %12.1f %10.1f %8.2f %6.1f%%", sname.c_str(), p.ranks,
              p.step_ms, p.comm_ms, p.exposed_ms, 100 * p.overlap, p.images_per_s, p.images_per_s_per_rank,
              p.speedup, 100 * p.efficiency);
  if (p.ps_busiest_bytes > 0) std::printf("  busiest server %.1f MiB", p.ps_busiest_bytes / (1 << 20));
  if (p.host_cpu_ms > 0 || p.copy_ms > 0) std::printf("  host %.1f ms, copies %.1f ms", p.host_cpu_ms, p.copy_ms);
  json row{{"strategy", sname}, {"ranks", p.ranks}, {"step_ms", p.step_ms}, {"compute_ms", p.compute_ms},
           {"comm_ms", p.comm_ms}, {"exposed_ms", p.exposed_ms}, {"straggler_ms", p.straggler_ms},
           {"overlap", p.overlap}, {"images_per_s", p.images_per_s},
           {"images_per_s_per_rank", p.images_per_s_per_rank}, {"speedup", p.speedup},
           {"efficiency", p.efficiency}, {"ps_busiest_server_bytes", p.ps_busiest_bytes},
           {"tp", so.strategy == Strategy::Tp ? so.tp : 1}, {"tp_ms", p.tp_ms}, {"host_cpu_ms", p.host_cpu_ms},
           {"copy_ms", p.copy_ms}};
  if (const json* cell = find_measured(measured, sname, p.ranks)) {
    const Verdict v = judge(p, cell->at("step_ms").get<double>(), cell->value("exposed_ms", 0.0));
    std::printf("  | measured %.2f ms (%+.0f%%), exposed %.2f vs %.2f ms (bound %.2f): %s", cell->at("step_ms").get<double>(),
                100 * v.step_error, v.predicted_exposed_ms, cell->value("exposed_ms", 0.0), v.exposed_bound_ms,
                v.within() ? "within target" : !v.step_ok && !v.exposed_ok ? "off: step and exposed"
                                               : !v.step_ok                ? "off: step"
                                                                           : "off: exposed");
    row["measured"] = *cell;
    row["verdict"] = {{"step_error", v.step_error}, {"predicted_exposed_ms", v.predicted_exposed_ms},
                      {"exposed_error_ms", v.exposed_error_ms}, {"exposed_bound_ms", v.exposed_bound_ms},
                      {"step_ok", v.step_ok}, {"exposed_ok", v.exposed_ok}, {"within_target", v.within()}};
  }
  std::printf("\n");
  return row;
}

// --json: the table and the inputs it was predicted from.
void write_json(const Args& a, const Inputs& in, const json& rows) {
  json b = json::array();
  for (const Bucket& x : in.prof.buckets) b.push_back({{"bytes", x.bytes}, {"ready_ms", x.ready_ms}});
  json out{{"inputs", {{"model", a.model}, {"params_m", in.total / 4e6}, {"batch_per_rank", a.batch},
                       {"trace", a.trace}, {"step_ms", in.prof.step_ms}, {"backward_end_ms", in.prof.backward_end_ms},
                       {"optimizer_ms", in.prof.optimizer_ms}, {"jitter_ms", in.prof.jitter_ms}, {"buckets", b}, {"wire", a.wire},
                       {"ps_servers", a.ps_servers}, {"cores", a.cores},
                       {"target", {{"step", Target{}.step}, {"exposed", Target{}.exposed},
                                   {"exposed_floor", Target{}.exposed_floor}}},
                       {"network", {{"alpha_us", in.net.alpha_us}, {"bandwidth_GBps", in.net.bandwidth_GBps},
                                    {"allreduce_efficiency", in.net.allreduce_efficiency},
                                    {"host_GBps", in.net.host_GBps}, {"copy_GBps", in.net.copy_GBps},
                                    {"ps_efficiency", in.net.ps_efficiency}}}}},
           {"predictions", rows}};
  std::ofstream(a.json_out) << out.dump(2) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"What-if scaling: step time, throughput and efficiency at N ranks from one measured rank"};
  add_flags(app, a);
  CLI11_PARSE(app, argc, argv);
  try {
    const Inputs in = read_inputs(a);
    const json measured = a.measured.empty() ? json::array() : read_measured(a.measured);
    print_header(a, in);
    json rows = json::array();
    for (const std::string& sname : split(a.strategies)) {
      const StrategyOptions so = strategy_options(a, sname);
      for (const std::string& rs : split(a.ranks)) {
        if (so.strategy == Strategy::Tp && std::stoi(rs) % so.tp != 0) continue;  // no grid of that size
        rows.push_back(predict_row(in, sname, so, std::stoi(rs), measured));
      }
    }
    if (!a.json_out.empty()) write_json(a, in, rows);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "whatif: %s\n", e.what());
    return 1;
  }
  return 0;
}
