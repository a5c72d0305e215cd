// tests/support/ddp_fixture.cpp: see ddp_fixture.h.
#include "tests/support/ddp_fixture.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

#include "core/backend.h"
#include "core/ops/ops.h"
#include "core/random.h"
#include "dist/ddp.h"
#include "checkpoint/checkpoint.h"

namespace tandem::testing::ddp_fixture {
namespace {
// What the diffs report for a NaN or infinite parameter, so that no tolerance check passes
// (std::max would silently drop a NaN).
constexpr double kNotFinite = std::numeric_limits<double>::infinity();
}  // namespace

SmallCnn::SmallCnn(uint64_t seed) {
  Generator g(seed);
  auto param = [&](const char* name, const Shape& s, double scale) {
    Tensor t = randn(s, g);
    ops::scale_(t, static_cast<float>(scale));
    return register_parameter(name, t);
  };
  c1w = param("conv1.weight", {4, 3, 3, 3}, 0.3);
  c1b = param("conv1.bias", {4}, 0.1);
  c2w = param("conv2.weight", {6, 3, 3, 4}, 0.3);
  c2b = param("conv2.bias", {6}, 0.1);
  fw = param("fc.weight", {10, 96}, 0.1);
  fb = param("fc.bias", {10}, 0.1);
}

Tensor SmallCnn::forward(const Tensor& x) {
  ops::Conv2dParams same{1, 1, 1, 1};
  Tensor h = ops::relu(ops::conv2d(x, c1w, c1b, same));
  h = ops::max_pool2d(h, {});
  h = ops::relu(ops::conv2d(h, c2w, c2b, same));
  return ops::linear(ops::flatten(h), fw, fb);
}

Data make_data(int64_t samples, Device device) {
  Generator g(1234);
  Tensor x = randn({samples, 8, 8, 3}, g), y = Tensor::empty({samples}, DType::I64);
  randint_(y, 10, g);
  if (device.is_cpu()) return {x, y};
  return {x.to(device), y.to(device)};
}

Tensor rank_rows(const Tensor& t, int rank) { return t.slice(rank * kBatch, (rank + 1) * kBatch); }

void sgd_step(Module& m) {
  for (Tensor& p : m.parameters()) ops::axpby_(p, p.grad(), 1.0f, -kLr);
}

void zero_grads(Module& m) {
  for (Tensor& p : m.parameters())
    if (p.grad().defined()) p.grad().zero_();
}

double max_rel_diff(Module& a, Module& b) {
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    std::vector<float> va = pa[i].to_vector(), vb = pb[i].to_vector();
    for (size_t j = 0; j < va.size(); ++j) {
      if (!std::isfinite(va[j]) || !std::isfinite(vb[j])) return kNotFinite;
      worst = std::max(worst, std::abs(double(va[j]) - vb[j]) / std::max(1e-3, std::abs(double(vb[j]))));
    }
  }
  return worst;
}

double max_tensor_rel_diff(Module& a, Module& b) {
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    std::vector<float> va = pa[i].to_vector(), vb = pb[i].to_vector();
    double diff = 0, size = 0;
    for (size_t j = 0; j < va.size(); ++j) {
      if (!std::isfinite(va[j]) || !std::isfinite(vb[j])) return kNotFinite;
      diff = std::max(diff, std::abs(double(va[j]) - vb[j]));
      size = std::max(size, std::abs(double(vb[j])));
    }
    worst = std::max(worst, diff / std::max(size, 1e-30));
  }
  return worst;
}

double max_named_rel_diff(const std::vector<std::pair<std::string, Tensor>>& a,
                          const std::vector<std::pair<std::string, Tensor>>& b,
                          const std::function<bool(const std::string&)>& skip) {
  std::map<std::string, Tensor> bm(b.begin(), b.end());
  double worst = a.size() == b.size() ? 0.0 : kNotFinite;
  for (auto& [name, t] : a) {
    auto it = bm.find(name);
    if (it == bm.end() || it->second.numel() != t.numel()) return kNotFinite;
    if (skip && skip(name)) continue;
    const std::vector<double> x = t.to_vector_f64(), y = it->second.to_vector_f64();
    double d = 0, m = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!std::isfinite(x[i]) || !std::isfinite(y[i])) return kNotFinite;
      d = std::max(d, std::abs(x[i] - y[i])), m = std::max(m, std::abs(y[i]));
    }
    worst = std::max(worst, m > 0 ? d / m : d);
  }
  return worst;
}

void save_on_rank0(dist::Communicator& comm, const std::string& path, const Module& model,
                   const std::vector<std::pair<std::string, Tensor>>& state) {
  if (comm.rank() == 0) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    save_checkpoint(path, model, state, TrainState{});
  }
  dist::all_gather_strings(comm, "saved");  // a barrier: the file exists before anyone reads it
}

std::string host_bytes(const Tensor& t) {
  Tensor h = t.is_cuda() ? t.to(Device::cpu()) : t;
  return std::string(static_cast<const char*>(h.data_ptr()), h.nbytes());
}

bool bit_identical(dist::Communicator& comm, Module& m, bool grads) {
  std::string mine;
  for (Tensor& p : m.parameters()) mine += host_bytes(grads ? p.grad() : p);
  std::vector<std::string> all = dist::all_gather_strings(comm, mine);
  for (const std::string& s : all)
    if (s != all[0]) return false;
  return true;
}

Trained train_ddp_and_reference(dist::Communicator& comm, const dist::ReducerOptions& ro, Device device) {
  Data d = make_data(comm.size() * kBatch, device);
  Trained t{std::make_shared<SmallCnn>(7 + 100 * comm.rank()), std::make_shared<SmallCnn>(7)};
  t.model->to(device);
  t.ref->to(device);
  dist::DdpOptions o;
  o.reducer = ro;
  dist::DistributedDataParallel ddp(t.model, comm, o);
  Tensor xs = rank_rows(d.x, comm.rank()), ys = rank_rows(d.y, comm.rank());
  for (int step = 0; step < kSteps; ++step) {
    zero_grads(*t.model);
    ops::cross_entropy(ddp(xs), ys).backward();
    sgd_step(*t.model);
    zero_grads(*t.ref);
    ops::cross_entropy((*t.ref)(d.x), d.y).backward();
    sgd_step(*t.ref);
  }
  return t;
}

bool on_device(Module& m, Device device) {
  bool ok = true;
  for (Tensor& p : m.parameters()) ok = ok && p.device() == device && p.grad().device() == device;
  return ok;
}

Trained check_equivalence(dist::Communicator& comm, const dist::ReducerOptions& ro, Device device, double bound) {
  Trained t = train_ddp_and_reference(comm, ro, device);
  CHECK(on_device(*t.model, device));
  const double diff = device.is_cpu() ? max_rel_diff(*t.model, *t.ref) : max_tensor_rel_diff(*t.model, *t.ref);
  if (comm.rank() == 0 && device.is_cuda())
    MESSAGE(std::string(comm.backend()), ", TF32 ", std::string(backend().allow_tf32 ? "on" : "off"),
            ": max norm-wise diff ", diff, " (bound ", bound, ")");
  CHECK(diff <= bound);
  CHECK(bit_identical(comm, *t.model));
  return t;
}

void check_equivalence_grid(dist::Communicator& comm, Device device, double bound) {
  for (bool bucketed : {true, false})
    for (bool overlap : {true, false}) {
      CAPTURE(bucketed);
      CAPTURE(overlap);
      dist::ReducerOptions ro;
      ro.bucketing = {256, 1024};  // several buckets even in this tiny model
      ro.bucketed = bucketed;
      ro.overlap = overlap;
      check_equivalence(comm, ro, device, bound);
    }
  check_equivalence(comm, {}, device, bound);  // default bucket sizes: one bucket
}

LayersNet::LayersNet(uint64_t seed, bool batchnorm) {
  Generator g(seed);
  Conv2dOptions co;
  co.padding = 1;
  conv = register_module("conv", std::make_shared<Conv2d>(3, 4, 3, co, &g));
  if (batchnorm) bn = register_module("bn", std::make_shared<BatchNorm2d>(4));
  fc = register_module("fc", std::make_shared<Linear>(256, 10, true, &g));
}

Tensor LayersNet::forward(const Tensor& x) {
  Tensor h = (*conv)(x);
  if (bn) h = (*bn)(h);
  return (*fc)(ops::flatten(ops::relu(h)));
}

bool collectives_capturable(dist::Communicator& comm) {
  const std::string backend = comm.backend();
  if (backend == "nccl") return true;
  MESSAGE("collectives go over ", backend, " here (ranks share a GPU): no CUDA graph to test");
  return false;
}

bool same_bits(Module& a, Module& b) {
  std::vector<Tensor> pa = a.parameters(), pb = b.parameters();
  if (pa.size() != pb.size()) return false;
  for (size_t i = 0; i < pa.size(); ++i)
    if (pa[i].dtype() != pb[i].dtype() || host_bytes(pa[i]) != host_bytes(pb[i])) return false;
  return true;
}

bool same_state(const std::vector<std::pair<std::string, Tensor>>& a,
                const std::vector<std::pair<std::string, Tensor>>& b) {
  if (a.size() != b.size()) return false;
  std::map<std::string, std::string> bytes;
  for (const auto& [name, t] : b) bytes[name] = host_bytes(t);
  for (const auto& [name, t] : a) {
    auto it = bytes.find(name);
    if (it == bytes.end() || it->second != host_bytes(t)) return false;
  }
  return true;
}

}  // namespace tandem::testing::ddp_fixture
