// tests/gpu_optim_parity.cpp: the fused multi-tensor CUDA SGD against the CPU loop.
// Sizes include tensors smaller than one chunk, exactly one chunk, and several chunks with a ragged
// tail (optim/cuda/sgd.cu cuts tensors into 32768-element chunks), plus one parameter without a
// gradient that must stay untouched. Exits 77 (Skipped) without a GPU.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

#include "core/random.h"
#include "optim/sgd.h"
#include "tests/support/parity.h"

using namespace tandem;
using namespace tandem::optim;
using testing::compare_values;
using testing::Tolerance;

namespace {
const std::vector<int64_t> kSizes{1, 64, 32768, 100003, 7};

// Runs 3 steps of SGD with the given options on `device`/`dtype` from identical f32 starting values
// and returns the final parameters and buffers as f32 host vectors.
std::vector<std::vector<float>> run(Device device, DType dtype, const SGDOptions& opt) {
  Generator gen(2024);
  std::vector<std::pair<std::string, Tensor>> named;
  std::vector<Tensor> params;
  for (size_t i = 0; i < kSizes.size(); ++i) {
    Tensor p = randn({kSizes[i]}, gen).to(dtype).to(device);
    p.set_requires_grad(true);
    params.push_back(p);
    named.emplace_back("p" + std::to_string(i), p);
  }
  SGD sgd(named, opt);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor g = randn({kSizes[i]}, gen);   // drawn even when unused, so streams stay aligned
      if (i == 2 && step == 1) continue;     // p2 has no gradient in step 1: skipped there
      params[i].set_grad(g.to(dtype).to(device));
    }
    if (step == 1) params[2].set_grad(Tensor());
    sgd.step();
  }
  std::vector<std::vector<float>> out;
  for (auto& p : params) out.push_back(p.to_vector());
  for (auto& [_, b] : sgd.state()) out.push_back(b.to_vector());
  return out;
}

void check_parity(DType dtype, const SGDOptions& opt, Tolerance tol) {
  auto cpu = run(Device::cpu(), DType::F32, opt);
  auto gpu = run(Device::cuda(0), dtype, opt);
  REQUIRE(cpu.size() == gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    std::string r = compare_values("tensor " + std::to_string(i), cpu[i], gpu[i], tol);
    CHECK_MESSAGE(r.empty(), r);
  }
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
