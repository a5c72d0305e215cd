// apps/bench_ops_fused.h: bench_ops' rows for the transformer's fused GEMM tails (included only by
// apps/bench_ops.cpp, CUDA builds): ops::bias_gelu and ops::bias_dropout_add next to the op
// sequences they replace (core/ops/fused_bias/fused_bias.h), on BERT-large's activations at sequence 512 x
// batch 32 (16384 tokens: tensors of 64-256 MB, far past the H100's 50 MB L2, so DRAM is measured).
//
// As in bench_ops_bandwidth.h, each row prints achieved GB/s = (algorithmic minimum bytes) /
// median time, next to a device-to-device copy of the same size measured in the same run. A fused
// row and its unfused partner share the same minimum, so their GB/s ratio is their speed ratio,
// and the unfused row's shortfall is its extra passes (add + gelu: 4 passes for a minimum of 2).
// "fwd+bwd" rows run forward and backward through autograd (x and bias require grad, the residual
// does not); their minimum is forward's bytes plus backward's (read dy and x, write dx for
// bias_gelu; read dy, write dx for bias_dropout_add) plus the leaf x's .grad, which autograd
// clones from dx (read + write: .grad is reset before each run so nothing accumulates): 7 passes
// for both. The bias gradient reads nothing extra when fused; unfused, it is one more read of the
// gradient (sum_to_trailing).
// "gelu alone" is the pass the encoder ran before, after a GEMM whose cuBLASLt BIAS epilogue had
// already added the bias: the fused op should match it, not beat it (fused_bias.h counts passes).
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "apps/bench_ops_bandwidth.h"
#include "apps/bench_ops_gpu.h"
#include "core/autograd.h"
#include "core/cuda/context.h"
#include "core/ops/ops.h"

namespace bench {

inline void fused_bias_part(const Timing& t, nlohmann::json& rows) {
  using namespace tandem;
  cudaStream_t s = cuda::compute_stream();
  const Device d = Device::cuda(cuda::current_device());
  const int64_t M = 512 * 32, ffn = 4096, hidden = 1024;  // BERT-large: FFN1 out [M, 4096], outputs [M, 1024]
  const double roof = copy_gbs(s, t, static_cast<size_t>(M * hidden) * 4);
  std::printf("\nGPU fused GEMM tails, BERT-large, 16384 tokens             dtype   ms      GB/s  %% of copy (copy: %.0f GB/s)\n",
              roof);
  auto report = [&](const char* name, const char* dtype, double ms, double bytes) {
    double gbs = bytes / ms / 1e6;
    std::printf("  %-56s %-5s %7.3f  %7.0f  %5.1f\n", name, dtype, ms, gbs, 100.0 * gbs / roof);
    rows.push_back({{"part", "gpu_fused_bias"}, {"name", name}, {"dtype", dtype}, {"ms", ms}, {"bytes", bytes},
                    {"gbs", gbs}, {"copy_gbs", roof}, {"fraction_of_copy", gbs / roof}});
  };
  auto leaf = [&](const Shape& sh, DType dt) {
    Tensor x = Tensor::full(sh, 0.01, dt, d);
    x.set_requires_grad(true);
    return x;
  };
  auto reset = [](Tensor& x, Tensor& b) {  // a fresh .grad each run: clone, never accumulate
    x.set_grad(Tensor());
    b.set_grad(Tensor());
  };
  const float p = 0.1f;  // BERT's hidden dropout
  for (DType dt : {DType::F32, DType::BF16}) {
    const char* label = dt == DType::BF16 ? "bf16" : "f32";
    const double es = static_cast<double>(dtype_size(dt));
    Generator gen(1);
    {  // bias + GELU on [M, 4096]
      const double n = static_cast<double>(M * ffn);
      Tensor x = leaf({M, ffn}, dt), b = leaf({ffn}, dt), dy = Tensor::full({M, ffn}, 0.01, dt, d);
      {
        autograd::NoGradGuard no_grad;
        report("bias_gelu, fused (read x, write y)", label, median_ms(s, t, [&] { ops::bias_gelu(x, b); }), 2 * n * es);
        report("add bias, then gelu (unfused; same minimum)", label,
               median_ms(s, t, [&] { ops::gelu(ops::add(x, b)); }), 2 * n * es);
        report("gelu alone (the old encoder's pass after a BIAS epilogue)", label,
               median_ms(s, t, [&] { ops::gelu(x); }), 2 * n * es);
      }
      report("bias_gelu fwd+bwd, fused (min 7 passes)", label, median_ms(s, t, [&] {
               reset(x, b);
               autograd::backward({ops::bias_gelu(x, b)}, {dy});
             }), 7 * n * es);
      report("add + gelu fwd+bwd, unfused (same minimum)", label, median_ms(s, t, [&] {
               reset(x, b);
               autograd::backward({ops::gelu(ops::add(x, b))}, {dy});
             }), 7 * n * es);
    }
    {  // bias + dropout + residual on [M, 1024]
      const double n = static_cast<double>(M * hidden);
      Tensor x = leaf({M, hidden}, dt), b = leaf({hidden}, dt), r = Tensor::full({M, hidden}, 0.01, dt, d);
      Tensor dy = Tensor::full({M, hidden}, 0.01, dt, d);
      {
        autograd::NoGradGuard no_grad;
        report("bias_dropout_add, fused (read x, residual, write y)", label,
               median_ms(s, t, [&] { ops::bias_dropout_add(x, b, r, p, true, gen); }), 3 * n * es);
        report("add bias, dropout, add residual (unfused; same min.)", label,
               median_ms(s, t, [&] { ops::add(ops::dropout(ops::add(x, b), p, true, gen), r); }), 3 * n * es);
      }
      report("bias_dropout_add fwd+bwd, fused (min 7 passes)", label, median_ms(s, t, [&] {
               reset(x, b);
               autograd::backward({ops::bias_dropout_add(x, b, r, p, true, gen)}, {dy});
             }), 7 * n * es);
      report("add, dropout, add fwd+bwd, unfused (same minimum)", label, median_ms(s, t, [&] {
               reset(x, b);
               autograd::backward({ops::add(ops::dropout(ops::add(x, b), p, true, gen), r)}, {dy});
             }), 7 * n * es);
    }
  }
}

}  // namespace bench
