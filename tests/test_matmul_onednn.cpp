// tests/test_matmul_onednn.cpp: the CPU's f32 GEMMs on oneDNN's dnnl_sgemm (core/ops/matmul/cpu.cpp,
// taken at 1 thread with BackendConfig::cpu_onednn on) against OpenBLAS's cblas_sgemm (cpu_onednn
// off), through the op layer: matmul on random shapes with every transpose pair, batched and not,
// with both gradients; linear with and without bias (the Bias epilogue: C pre-filled, beta = 1),
// with its three gradients; and the rule itself (2 threads, cpu_onednn off or a GEMM under 2^22
// multiply-adds keep OpenBLAS). Shapes are odd-sized and above that floor, so oneDNN runs them.
// Without oneDNN in the build the comparisons are skipped with a message (nothing to compare).
#include <cblas.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops/conv/cpu_onednn.h"
#include "core/ops/matmul/kernels.h"
#include "core/ops/ops.h"
#include "core/threads.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::rand_f64;

namespace {

// The two libraries sum the same k products in different orders (and blockings); with values in
// [-1, 1] each partial sum stays below k and rounds by at most f32 eps of its size, so 4 k eps
// bounds the difference with room to spare, while a wrong transpose, stride or bias errs by O(1).
// (The rule of tests/test_conv_onednn.cpp; test_matmul_grad.cpp's 1e-5 is the same bound at k = 6.)
constexpr double kF32Eps = 1.1920929e-7;

double max_diff(const Tensor& x, const Tensor& y) {
  const std::vector<double> a = x.to_vector_f64(), b = y.to_vector_f64();
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

Tensor rand32(const Shape& s, uint64_t seed, bool grad) {
  return rand_f64(s, seed, -1, 1, false).to(DType::F32).detach().set_requires_grad(grad);
}

// A GEMM of batch x m x n x k multiply-adds; forward and both backward GEMMs of a matmul or
// linear have the same count, so one stands for all three in the rule.
kernels::GemmArgs gemm_of(int64_t batch, int64_t m, int64_t n, int64_t k) {
  kernels::GemmArgs g;
  g.batch = batch, g.m = m, g.n = n, g.k = k;
  return g;
}

// Runs f (which builds a loss from fresh leaves and returns the tensors to compare) on OpenBLAS
// and on oneDNN, and checks every pair within the bound for inner dimension k. `g`: its GEMMs' size.
template <class F>
void compare_paths(const kernels::GemmArgs& g, int64_t k, F f) {
  std::vector<Tensor> ref, got;
  {
    BackendScope s(&BackendConfig::cpu_onednn, false);
    REQUIRE(!kernels::cpu_sgemm_uses_onednn(g));
    ref = f();
  }
  {
    BackendScope s(&BackendConfig::cpu_onednn, true), on(&BackendConfig::cpu_onednn_sgemm, true);
    REQUIRE(kernels::cpu_sgemm_uses_onednn(g));
    got = f();
  }
  REQUIRE(ref.size() == got.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    CAPTURE(i);
    CHECK(ref[i].shape() == got[i].shape());
    CHECK(max_diff(ref[i], got[i]) <= 4 * std::max<int64_t>(k, 1) * kF32Eps);
  }
}

// 1 thread for the test's duration (the rule's condition), the previous count put back after.
struct OneThread {
  int prev = openblas_get_num_threads();
  OneThread() { set_cpu_threads(CpuThreads{1, 1, "test"}); }
  ~OneThread() { set_cpu_threads(CpuThreads{prev, prev, "test"}); }
};

}  // namespace

TEST_CASE("f32 GEMMs take oneDNN only at 1 thread with cpu_onednn on, from 2^22 multiply-adds, when built with it") {
  BackendScope s(&BackendConfig::cpu_onednn, true);
  const kernels::GemmArgs floor = gemm_of(1, 1, 1, int64_t{1} << 22), attention = gemm_of(64, 128, 128, 64);
  OneThread one;
  CHECK(!kernels::cpu_sgemm_uses_onednn(floor));  // off by default (core/backend.h: cpu_onednn_sgemm)
  BackendScope on(&BackendConfig::cpu_onednn_sgemm, true);
  CHECK(kernels::cpu_sgemm_uses_onednn(floor) == kernels::onednn_built());
  CHECK(kernels::cpu_sgemm_uses_onednn(attention) == kernels::onednn_built());
  CHECK(!kernels::cpu_sgemm_uses_onednn(gemm_of(1, 1, 1, (int64_t{1} << 22) - 1)));
  CHECK(!kernels::cpu_sgemm_uses_onednn(gemm_of(1, 32, 10, 128)));  // the main job's classifier
  set_cpu_threads(CpuThreads{2, 2, "test"});
  CHECK(!kernels::cpu_sgemm_uses_onednn(floor));
  set_cpu_threads(CpuThreads{1, 1, "test"});
  BackendScope off(&BackendConfig::cpu_onednn, false);
  CHECK(!kernels::cpu_sgemm_uses_onednn(floor));
}

TEST_CASE("matmul: oneDNN equals OpenBLAS on random shapes, transposes and batches, forward and backward") {
  if (!kernels::onednn_built()) {
    MESSAGE("built without oneDNN: the f32 GEMMs always run OpenBLAS, nothing to compare");
    return;
  }
  OneThread one;
  std::mt19937 rng(31);
  auto pick = [&](int lo, int hi) { return static_cast<int64_t>(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  for (int trial = 0; trial < 24; ++trial) {
    const bool ta = trial & 1, tb = trial & 2;
    int64_t B, m, n, k;
    do {  // random sizes (a single row every fifth trial), drawn again until the GEMM reaches oneDNN's floor
      B = trial % 3 == 0 ? 1 : pick(2, 4), m = trial % 5 == 0 ? 1 : pick(2, 301);
      n = pick(1, m == 1 ? 3000 : 400), k = pick(1, m == 1 ? 3000 : 900);
    } while (B * m * n * k < (int64_t{1} << 22));
    CAPTURE(trial);
    CAPTURE(B);
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    const Shape sa = B == 1 ? (ta ? Shape{k, m} : Shape{m, k}) : (ta ? Shape{B, k, m} : Shape{B, m, k});
    const Shape sb = B == 1 ? (tb ? Shape{n, k} : Shape{k, n}) : (tb ? Shape{B, n, k} : Shape{B, k, n});
    const uint64_t seed = 100 + 3 * trial;
    compare_paths(gemm_of(B, m, n, k), std::max({k, m, n}), [&] {
      Tensor a = rand32(sa, seed, true), b = rand32(sb, seed + 1, true);
      Tensor c = ops::matmul(a, b, ta, tb);
      c.backward(rand32(c.shape(), seed + 2, false));
      return std::vector<Tensor>{c, a.grad(), b.grad()};
    });
  }
}

TEST_CASE("linear: oneDNN equals OpenBLAS with and without bias, forward and the three gradients") {
  if (!kernels::onednn_built()) {
    MESSAGE("built without oneDNN: the f32 GEMMs always run OpenBLAS, nothing to compare");
    return;
  }
  OneThread one;
  struct L {
    Shape x;
    int64_t out;
    bool bias;
  };
  // 3-D inputs (a batch of sequences), odd sizes, one with a single row, one wide output; all at
  // or above oneDNN's floor of 2^22 multiply-adds.
  for (const L& l : {L{{2, 71, 300}, 197, true}, L{{130, 512}, 130, true}, L{{1, 4096}, 1031, true},
                     L{{257, 129}, 129, false}, L{{3, 40, 256}, 513, true}}) {
    CAPTURE(l.out);
    const int64_t in = l.x.back(), rows = shape_numel(l.x) / in;
    compare_paths(gemm_of(1, rows, l.out, in), std::max(in, rows), [&] {
      Tensor x = rand32(l.x, 7, true), w = rand32({l.out, in}, 8, true);
      Tensor b = l.bias ? rand32({l.out}, 9, true) : Tensor();
      Tensor y = ops::linear(x, w, b);
      y.backward(rand32(y.shape(), 10, false));
      std::vector<Tensor> r{y, x.grad(), w.grad()};
      if (l.bias) r.push_back(b.grad());
      return r;
    });
  }
}
