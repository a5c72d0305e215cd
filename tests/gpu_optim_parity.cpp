// tests/gpu_optim_parity.cpp: the fused multi-tensor CUDA optimizers (SGD, AdamW, LAMB) and the
// gradient-norm clipping against the CPU loops.
// Sizes include tensors smaller than one chunk, exactly one chunk, and several chunks with a ragged
// tail (optim/cuda/*.cu cut tensors into 32768-element chunks), plus one parameter without a
// gradient that must stay untouched. For AdamW and LAMB that parameter then lags one step behind,
// so a step runs two launch groups with different bias corrections. Exits 77 (Skipped) without a GPU.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

#include "core/random.h"
#include "optim/clip.h"
#include "optim/sgd.h"
#include "tests/support/parity.h"

using namespace tandem;
using namespace tandem::optim;
using testing::compare_values;
using testing::Tolerance;

namespace {
const std::vector<int64_t> kSizes{1, 64, 32768, 100003, 7};

// Runs 3 steps of optimizer `name` (make_optimizer) on `device`/`dtype` from identical f32 starting
// values and returns the final parameters and state tensors as f32 host vectors. `split` builds the
// optimizer from segments instead: the 100003-element parameter is cut in two, listed apart (first
// and last), to exercise LAMB's per-parameter sums over non-adjacent segments.
std::vector<std::vector<float>> run_named(const std::string& name, Device device, DType dtype,
                                          const OptimizerOptions& opt, bool split = false) {
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
  for (int step = 0; step < 3; ++step) {
    std::vector<Tensor> grads;
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor g = randn({kSizes[i]}, gen);  // drawn even when unused, so streams stay aligned
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
    optimizer->step();
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

void check_named(const std::string& name, DType dtype, const OptimizerOptions& opt, Tolerance tol, bool split = false) {
  auto cpu = run_named(name, Device::cpu(), DType::F32, opt);
  auto gpu = run_named(name, Device::cuda(0), dtype, opt, split);
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
