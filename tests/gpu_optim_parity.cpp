// tests/gpu_optim_parity.cpp: the fused multi-tensor CUDA optimizers (SGD, AdamW, LAMB) and the
// gradient-norm clipping against the CPU loops.
// Sizes include tensors smaller than one chunk, exactly one chunk, and several chunks with a ragged
// tail (optim/cuda/*.cu cut tensors into 32768-element chunks), plus one parameter without a
// gradient that must stay untouched. For AdamW and LAMB that parameter then lags one step behind,
// so one launch holds segments at different step counts (each block computes its own segment's bias
// corrections from the count on the device). Exits 77 (Skipped) without a GPU.
// The capturable paths (optim/optimizer.h): a run with a step skipped through found_inf (its
// gradients inf) against the CPU's same run; a CUDA graph replaying step(found_inf) against the same
// steps run eagerly - bit for bit, LR changes and skipped steps included; GradClipper against
// clip_grad_norm - bit for bit, eager and replayed.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <limits>

#include "core/ops/elementwise/elementwise.h"
#include "core/random.h"
#include "optim/clip.h"
#include "optim/sgd.h"
#include "tests/support/parity.h"
#ifdef TANDEM_WITH_CUDA
#include "core/cuda/graph.h"
#endif

using namespace tandem;
using namespace tandem::optim;
using testing::compare_values;
using testing::Tolerance;

namespace {
const std::vector<int64_t> kSizes{1, 64, 32768, 100003, 7};

// Runs 3 steps of optimizer `name` (make_optimizer) on `device`/`dtype` from identical f32 starting
// values and returns the final parameters and state tensors as f32 host vectors. `split` builds the
// optimizer from segments instead: the 100003-element parameter is cut in two, listed apart (first
// and last), to exercise LAMB's per-parameter sums over non-adjacent segments. `skip`: the last step
// gets inf gradients and a raised found_inf flag, so it must change nothing.
std::vector<std::vector<float>> run_named(const std::string& name, Device device, DType dtype,
                                          const OptimizerOptions& opt, bool split = false, bool skip = false) {
  Generator gen(2024);
  NamedTensors named;
  std::vector<Tensor> params;
  for (size_t i = 0; i < kSizes.size(); ++i) {
    Tensor p = randn({kSizes[i]}, gen).to(dtype).to(device);
    p.set_requires_grad(true);
    params.push_back(p);
    named.emplace_back("p" + std::to_string(i), p);
  }
  std::unique_ptr<Optimizer> optimizer;
  std::vector<ParamSegment> segs;
  if (split) {
    const int64_t cut = 50000, n = kSizes[3];
    segs.push_back({"p3", params[3].detach().slice(0, cut), Tensor(), 0, n, 3});
    for (size_t i = 0; i < kSizes.size(); ++i)
      if (i != 3) segs.push_back({named[i].first, params[i].detach(), Tensor(), 0, -1, static_cast<int64_t>(i)});
    segs.push_back({"p3", params[3].detach().slice(cut, n), Tensor(), cut, n, 3});
    optimizer = make_optimizer(name, segs, static_cast<int64_t>(kSizes.size()), opt);
  } else {
    optimizer = make_optimizer(name, named, opt);
  }
  const int steps = skip ? 4 : 3;
  Tensor flag = Tensor::zeros({1}, DType::F32, device);
  for (int step = 0; step < steps; ++step) {
    const bool skipped = step == 3;
    flag.fill_(skipped ? 1.0 : 0.0);
    std::vector<Tensor> grads;
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor g = randn({kSizes[i]}, gen);  // drawn even when unused, so streams stay aligned
      if (skipped) g = Tensor::full({kSizes[i]}, std::numeric_limits<double>::infinity());
      grads.push_back(i == 2 && step == 1 ? Tensor() : g.to(dtype).to(device));
      params[i].set_grad(grads.back());
    }
    if (split) {
      std::vector<Tensor> sg;
      for (const auto& s : segs) {
        const size_t i = static_cast<size_t>(s.param_index);
        sg.push_back(grads[i].defined() ? grads[i].slice(s.offset, s.offset + s.param.numel()) : Tensor());
      }
      optimizer->set_grads(sg);
    }
    optimizer->step(flag);
  }
  std::vector<std::vector<float>> out;
  for (auto& p : params) out.push_back(p.to_vector());
  if (!split)
    for (auto& [_, b] : optimizer->state()) out.push_back(b.to_vector());
  return out;
}

// bf16 Adam-family: the moments are running sums of gradients of both signs, stored in bf16, and the
// update divides m by sqrt(v), so where m cancels a rounding moves the update by a fraction of lr
// whatever the element's size. Measured on an H100 (2026-11-22): 31 of 100003 elements beyond the
// element-wise bound, all within 1.7e-3 (0.17 lr); max_rel = 2^-7 of the largest entry covers them.
const Tolerance kAdamBf16{2e-2, 1e-3, "bf16 storage, 3 roundings; m cancels (see kAdamBf16)", 0x1p-7};

void check_named(const std::string& name, DType dtype, const OptimizerOptions& opt, Tolerance tol, bool split = false,
                 bool skip = false) {
  auto cpu = run_named(name, Device::cpu(), DType::F32, opt, false, skip);
  auto gpu = run_named(name, Device::cuda(0), dtype, opt, split, skip);
  if (split) cpu.resize(kSizes.size());  // a segmented optimizer's state is per segment: compare params
  REQUIRE(cpu.size() == gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    std::string r = compare_values(name + " tensor " + std::to_string(i), cpu[i], gpu[i], tol);
    CHECK_MESSAGE(r.empty(), r);
  }
}

// SGD through the factory, from its own options struct.
void check_parity(DType dtype, const SGDOptions& so, Tolerance tol) {
  OptimizerOptions o;
  o.lr = so.lr, o.momentum = so.momentum, o.dampening = so.dampening, o.weight_decay = so.weight_decay;
  o.nesterov = so.nesterov;
  check_named("sgd", dtype, o, tol);
}
}  // namespace

TEST_CASE("fused CUDA SGD matches the CPU loop in f32") {
  // Same formula in float on both sides; only FMA contraction can differ (a few ulps per step).
  Tolerance tol{1e-5, 1e-6, "f32, same order of operations, FMA contraction differs"};
  check_parity(DType::F32, {0.1, 0.9, 0.0, 1e-4, false}, tol);
  check_parity(DType::F32, {0.1, 0.9, 0.0, 1e-4, true}, tol);
  check_parity(DType::F32, {0.05, 0.8, 0.3, 0.0, false}, tol);
  check_parity(DType::F32, {0.1, 0.0, 0.0, 5e-4, false}, tol);
  OptimizerOptions o;
  o.lr = 0.1, o.momentum = 0.9, o.dampening = 0.2, o.weight_decay = 1e-4;
  check_named("sgd", DType::F32, o, tol, false, true);  // a last step skipped on the device
}

TEST_CASE("fused CUDA SGD in bf16 and f16 tracks the f32 reference") {
  // Params, grads and buffers are stored in 16 bits (rounded after every step): bf16 has an 8-bit
  // mantissa (relative step 2^-8 = 0.4%), three steps of rounding stay within ~1.5%; f16 has 11 bits.
  check_parity(DType::BF16, {0.1, 0.9, 0.0, 1e-4, true}, Tolerance{2e-2, 2e-2, "bf16 storage, 3 roundings"});
  check_parity(DType::F16, {0.1, 0.9, 0.0, 1e-4, true}, Tolerance{4e-3, 4e-3, "f16 storage, 3 roundings"});
}

namespace {
OptimizerOptions adam_options(double lr, double wd) {
  OptimizerOptions o;
  o.lr = lr;
  o.weight_decay = wd;
  return o;
}
}  // namespace

// f32: the same formulas in float on both sides (CPU loop and kernel); FMA contraction and, for
// LAMB, the norm summation order (f64 on the CPU, f32 block trees on the GPU, ~1e-6 relative in
// the trust ratio, times an lr of 1e-2) separate them.
// bf16: params and both moments are stored in 16 bits, rounded after every step, and the inputs
// are rounded once. lr = 1e-2 keeps each update above bf16's spacing for |w| < 1 (2^-8 relative),
// so three steps are off by at most ~3 ulps (1.2%) plus the input rounding; atol covers weights
// that end near 0, where one ulp of a 1e-2 update is ~4e-5.
// f16 is not covered: Adam's second moment (1e-3 g^2 at the first step) falls below f16's normal
// range; mixed precision keeps the moments in f32 master state (optim/optimizer.h).
TEST_CASE("fused CUDA AdamW matches the CPU loop") {
  Tolerance f32{1e-5, 1e-6, "f32, same order of operations, FMA contraction differs"};
  check_named("adamw", DType::F32, adam_options(1e-2, 1e-2), f32);
  check_named("adamw", DType::F32, adam_options(1e-3, 0.0), f32);
  check_named("adamw", DType::F32, adam_options(1e-2, 1e-2), f32, true);
  check_named("adamw", DType::F32, adam_options(1e-2, 1e-2), f32, false, true);  // a skipped last step
  check_named("adamw", DType::BF16, adam_options(1e-2, 1e-2), kAdamBf16);
}

TEST_CASE("fused CUDA LAMB matches the CPU loops, whole and as segments, with and without a norm hook") {
  Tolerance f32{1e-5, 1e-6, "f32; trust-ratio norms summed in f64 (CPU) vs f32 trees (GPU)"};
  check_named("lamb", DType::F32, adam_options(1e-2, 1e-2), f32);
  check_named("lamb", DType::F32, adam_options(1e-2, 0.0), f32);
  check_named("lamb", DType::F32, adam_options(1e-2, 1e-2), f32, true);
  OptimizerOptions hooked = adam_options(1e-2, 1e-2);
  int calls = 0;
  hooked.norm_reduce = [&](std::vector<double>& v) {  // one rank: the all-reduce is the identity
    CHECK(v.size() == 2 * kSizes.size());
    ++calls;
  };
  check_named("lamb", DType::F32, hooked, f32, true);
  CHECK(calls == 6);  // 3 steps on the CPU, 3 on the GPU
  OptimizerOptions device_hooked = adam_options(1e-2, 1e-2);
  int device_calls = 0;
  device_hooked.norm_reduce_device = [&](Tensor& sums) {  // one rank: the all-reduce is the identity
    CHECK(sums.numel() == static_cast<int64_t>(2 * kSizes.size()));
    ++device_calls;
  };
  check_named("lamb", DType::F32, device_hooked, f32, true);
  CHECK(device_calls == 6);
  check_named("lamb", DType::F32, adam_options(1e-2, 1e-2), f32, false, true);  // a skipped last step
  check_named("lamb", DType::BF16, adam_options(1e-2, 1e-2), kAdamBf16);
}

TEST_CASE("clip_grad_norm on CUDA matches the CPU: the norm and the clipped gradients") {
  for (DType dtype : testing::kParityDtypes) {
    CAPTURE(dtype_name(dtype));
    Generator gen(7);
    std::vector<Tensor> cpu, gpu;
    for (int64_t n : kSizes) {
      Tensor g = randn({n}, gen).to(dtype).to(DType::F32);  // the same rounded values on both sides
      cpu.push_back(g.clone());
      gpu.push_back(g.to(dtype).to(Device::cuda(0)));
    }
    gpu.push_back(Tensor());  // an undefined gradient is skipped
    const double max_norm = 10.0;  // ~sqrt(132k) = 364 before clipping: the scale applies
    const double n_cpu = clip_grad_norm(cpu, max_norm);
    const double n_gpu = clip_grad_norm(gpu, max_norm);
    // f32 partial sums over 32768-element chunks vs one f64 sum: ~1e-6 relative.
    CHECK(n_gpu == doctest::Approx(n_cpu).epsilon(1e-5));
    for (size_t i = 0; i < cpu.size(); ++i) {
      std::string r = compare_values("clipped gradient " + std::to_string(i), cpu[i].to_vector(), gpu[i].to_vector(),
                                     testing::rounded_once(dtype, "f32: one multiplication by the same scale"));
      CHECK_MESSAGE(r.empty(), r);
    }
  }
}

TEST_CASE("GradClipper on CUDA equals clip_grad_norm on CUDA bit for bit") {
  for (DType dtype : testing::kParityDtypes) {
    for (double max_norm : {10.0, 1e6}) {  // clipping applied; not applied
      CAPTURE(dtype_name(dtype));
      CAPTURE(max_norm);
      Generator gen(8);
      std::vector<Tensor> host_api, clipped;
      for (int64_t n : kSizes) {
        Tensor g = randn({n}, gen).to(dtype).to(Device::cuda(0));
        host_api.push_back(g.clone());
        clipped.push_back(g.clone());
      }
      const double norm = clip_grad_norm(host_api, max_norm);
      GradClipper clipper(max_norm);
      clipper.clip(clipped);
      // The same f32 total, then sqrt and the coefficient in f64 on both sides (optim/clip.h).
      CHECK(clipper.norm().item() == static_cast<float>(norm));
      for (size_t i = 0; i < kSizes.size(); ++i)
        CHECK(clipped[i].to(Device::cpu()).to_vector() == host_api[i].to(Device::cpu()).to_vector());
    }
  }
}

#ifdef TANDEM_WITH_CUDA
namespace {
// Six steps of `name` on the GPU over static gradient tensors (new values copied in before each
// step, outside any graph), the LR changing at step 2 and steps 2 and 4 skipped through the flag
// (their gradients inf). graph: step 0 runs eagerly, step 1 is captured, every step from 1 on is a
// replay. Returns the parameters and the state, as f32 host vectors.
std::vector<std::vector<float>> run_steps(const std::string& name, const OptimizerOptions& o, bool graph) {
  const Device gpu = Device::cuda(0);
  Generator gen(99);
  NamedTensors named;
  std::vector<Tensor> grads;
  for (size_t i = 0; i < kSizes.size(); ++i) {
    Tensor p = randn({kSizes[i]}, gen).to(gpu);
    p.set_requires_grad(true);
    grads.push_back(Tensor::zeros({kSizes[i]}, DType::F32, gpu));
    p.set_grad(grads.back());
    named.emplace_back("p" + std::to_string(i), p);
  }
  auto opt = make_optimizer(name, named, o);
  REQUIRE(opt->capturable());
  Tensor flag = Tensor::zeros({1}, DType::F32, gpu);
  cuda::StepGraph step_graph(0);
  for (int step = 0; step < 6; ++step) {
    const bool skipped = step == 2 || step == 4;
    for (size_t i = 0; i < kSizes.size(); ++i) {
      Tensor g = randn({kSizes[i]}, gen);
      grads[i].copy_(skipped ? Tensor::full({kSizes[i]}, std::numeric_limits<double>::infinity()) : g);
    }
    flag.fill_(skipped ? 1.0 : 0.0);
    opt->set_lr(*o.lr * (step >= 2 ? 0.5 : 1.0));
    if (!graph || step == 0) {
      opt->step(flag);
      continue;
    }
    if (step == 1) step_graph.capture([&] { opt->step(flag); });
    step_graph.replay();
  }
  std::vector<std::vector<float>> out;
  for (auto& [_, p] : named) out.push_back(p.to(Device::cpu()).to_vector());
  for (auto& [_, t] : opt->state()) out.push_back(t.to(Device::cpu()).to(DType::F32).view({-1}).to_vector());
  return out;
}
}  // namespace

TEST_CASE("a CUDA graph of step(found_inf) replays the eager steps bit for bit: LR changes, skips, counts") {
  OptimizerOptions sgd;
  sgd.lr = 0.1, sgd.momentum = 0.9, sgd.dampening = 0.1, sgd.weight_decay = 1e-4;
  for (const auto& [name, o] : std::vector<std::pair<std::string, OptimizerOptions>>{
           {"sgd", sgd}, {"adamw", adam_options(1e-2, 1e-2)}, {"lamb", adam_options(1e-2, 1e-2)}}) {
    CAPTURE(name);
    const auto eager = run_steps(name, o, false), replayed = run_steps(name, o, true);
    REQUIRE(eager.size() == replayed.size());
    for (size_t i = 0; i < eager.size(); ++i) {
      CAPTURE(i);
      CHECK(replayed[i] == eager[i]);  // same kernels, same addresses, same device-side values
    }
    // The counts followed the applied steps only: 6 calls, 2 skipped.
    if (name != "sgd") CHECK(eager[kSizes.size()][0] == 4.0f);  // "p0.step"
  }
}

TEST_CASE("a CUDA graph of GradClipper::clip follows new gradients and equals clip_grad_norm") {
  const Device gpu = Device::cuda(0);
  std::vector<Tensor> grads;
  for (int64_t n : kSizes) grads.push_back(Tensor::zeros({n}, DType::F32, gpu));
  GradClipper clipper(10.0);
  cuda::StepGraph graph(0);
  Generator gen(3);
  for (int step = 0; step < 4; ++step) {
    CAPTURE(step);
    std::vector<Tensor> reference;
    for (size_t i = 0; i < kSizes.size(); ++i) {
      Tensor g = randn({kSizes[i]}, gen);
      if (step == 3) g = ops::scale(g, 1e-3f);  // norm ~0.4: below max_norm, left alone
      grads[i].copy_(g);
      reference.push_back(g.to(gpu));
    }
    const double norm = clip_grad_norm(reference, 10.0);
    if (step == 0) {
      clipper.clip(grads);  // eager: allocates the clipper's tensors and tables
    } else {
      if (step == 1) graph.capture([&] { clipper.clip(grads); });
      graph.replay();
    }
    CHECK(clipper.norm().item() == static_cast<float>(norm));
    for (size_t i = 0; i < kSizes.size(); ++i)
      CHECK(grads[i].to(Device::cpu()).to_vector() == reference[i].to(Device::cpu()).to_vector());
  }
}
#endif  // TANDEM_WITH_CUDA
