// apps/bench_ops_rowwise.h: bench_ops' rows for the row-wise and window kernels that issues 17 and
// 18 ask to run at >= 80 % of copy bandwidth (included only by apps/bench_ops.cpp, CUDA builds):
//   - layer_norm forward and backward at BERT-large's activations, batch 64 x seq 128 = 8192 rows
//     of 1024 features;
//   - scale_mask_softmax forward and backward at BERT-large's scores [B=64, H=16, 128, 128], with
//     a padding mask and the attention dropout (p = 0.1), and forward without dropout;
//   - max_pool2d forward and backward at ResNet-50's stem pool, [256, 112, 112, 64] -> 56 x 56,
//     3x3/2 pad 1, NHWC bf16 (411 MB in: DRAM, not L2).
// Rows print achieved GB/s = (algorithmic minimum bytes) / median time next to a device-to-device
// copy of the section's largest tensor, measured in the same run (bench_ops_bandwidth.h's rule).
// The minimum counts each tensor the op must read or write once, including what the op saves for
// its backward by design (mean/rstd rows; the softmax's probabilities; max pooling's int32 argmax,
// which is 2/7 of its forward's bytes in bf16), and not the small operands (weights, masks).
// Backward rows call the backend entry points (core/ops/*/kernels.h) directly on saved tensors, so
// they time exactly the backward kernels, without autograd's bookkeeping or a .grad copy; forward
// rows time the public op under NoGradGuard (the op's allocations come from the caching allocator).
#pragma once
#include <vector>

#include "apps/bench_ops_bandwidth.h"  // BandwidthReport, copy_gbs, and the CUDA and bench headers
#include "core/ops/attention/kernels.h"
#include "core/ops/norm/kernels.h"
#include "core/ops/pool/kernels.h"
#include "core/random.h"

namespace bench {

// The three sections share the stream, the device and one generator (random inputs: constant ones
// would make every max-pool window a tie and every softmax row uniform).
struct RowwiseBench {
  const Timing& t;
  nlohmann::json& rows;
  cudaStream_t s = tandem::cuda::compute_stream();
  tandem::Device d = tandem::Device::cuda(tandem::cuda::current_device());
  tandem::Generator gen{7};

  void layer_norm_rows();
  void softmax_rows();
  void max_pool_rows();
};

inline void RowwiseBench::layer_norm_rows() {
  using namespace tandem;
  {  // LayerNorm: 8192 x 1024. Forward: read x, write y, mean, rstd. Backward: read dy, x, mean,
     // rstd, write dx (dweight/dbias are [1024]: negligible).
    const int64_t M = 64 * 128, D = 1024, n = M * D;
    const BandwidthReport report{copy_gbs(s, t, static_cast<size_t>(n) * 4), rows, "gpu_rowwise"};
    std::printf("\nGPU layer_norm, BERT-large [%lld, %lld]             dtype   ms      GB/s  %% of copy (copy: %.0f GB/s)\n",
                (long long)M, (long long)D, report.roof);
    for (DType dt : {DType::F32, DType::BF16}) {
      const char* label = dt == DType::BF16 ? "bf16" : "f32";
      const double es = static_cast<double>(dtype_size(dt));
      Tensor x = randn({M, D}, gen, dt, d), dy = randn({M, D}, gen, dt, d);
      Tensor w = randn({D}, gen, dt, d), b = randn({D}, gen, dt, d);
      report("layer_norm fwd (read x, write y)", label, median_ms(s, t, [&] { ops::layer_norm(x, w, b); }),
             2 * n * es + 8.0 * M);
      Tensor y = Tensor::empty({M, D}, dt, d), mean = Tensor::empty({M}, DType::F32, d);
      Tensor rstd = Tensor::empty({M}, DType::F32, d);
      kernels::layer_norm_fwd_cuda(x, w, b, 1e-5, y, mean, rstd);
      Tensor dx = Tensor::empty({M, D}, dt, d), dw = Tensor::empty({D}, dt, d), db = Tensor::empty({D}, dt, d);
      report("layer_norm bwd (read dy, x, write dx)", label,
             median_ms(s, t, [&] { kernels::layer_norm_bwd_cuda(dy, x, w, mean, rstd, dx, dw, db); }),
             3 * n * es + 8.0 * M);
    }
  }
}

inline void RowwiseBench::softmax_rows() {
  using namespace tandem;
  {  // scale_mask_softmax on [64, 16, 128, 128] with a [64, 128] padding mask (a quarter padded).
    const int64_t B = 64, H = 16, S = 128, n = B * H * S * S;
    const BandwidthReport report{copy_gbs(s, t, static_cast<size_t>(n) * 4), rows, "gpu_rowwise"};
    std::printf("\nGPU scale_mask_softmax [%lld, %lld, %lld, %lld]              dtype   ms      GB/s  %% of copy (copy: %.0f GB/s)\n",
                (long long)B, (long long)H, (long long)S, (long long)S, report.roof);
    std::vector<int64_t> keep(static_cast<size_t>(B * S), 1);
    for (int64_t i = 0; i < B; ++i)
      for (int64_t j = S * 3 / 4; j < S; ++j) keep[static_cast<size_t>(i * S + j)] = 0;
    Tensor mask = Tensor::from_vector_i64(keep, {B, S}, DType::I32).to(d);
    for (DType dt : {DType::F32, DType::BF16}) {
      const char* label = dt == DType::BF16 ? "bf16" : "f32";
      const double es = static_cast<double>(dtype_size(dt));
      Tensor x = randn({B, H, S, S}, gen, dt, d), dy = randn({B, H, S, S}, gen, dt, d);
      report("softmax fwd, no dropout (read x, write p)", label,
             median_ms(s, t, [&] { ops::scale_mask_softmax(x, mask, 0.125f); }), 2 * n * es);
      kernels::SoftmaxArgs a;
      a.rows = B * H * S;
      a.cols = S;
      a.rows_per_batch = H * S;
      a.scale = 0.125f;
      a.dropout = true;
      a.dropout_p = 0.1f;
      a.seed = 1;
      Tensor probs = Tensor::empty_like(x), out = Tensor::empty_like(x), dx = Tensor::empty_like(x);
      report("softmax fwd, dropout 0.1 (read x, write p, y)", label,
             median_ms(s, t, [&] { kernels::scale_mask_softmax_fwd_cuda(x, mask, a, probs, out); }), 3 * n * es);
      report("softmax bwd, dropout 0.1 (read p, dy, write dx)", label,
             median_ms(s, t, [&] { kernels::scale_mask_softmax_bwd_cuda(probs, dy, mask, a, dx); }), 3 * n * es);
    }
  }
}

inline void RowwiseBench::max_pool_rows() {
  using namespace tandem;
  {  // Max pooling, ResNet-50's stem: forward reads x, writes y and the int32 argmax; backward
     // reads dy and argmax, writes dx.
    pool::Geom g;
    g.N = 256, g.H = 112, g.W = 112, g.C = 64, g.OH = 56, g.OW = 56;
    g.kh = g.kw = 3, g.sh = g.sw = 2, g.ph = g.pw = 1;
    const DType dt = DType::BF16;
    const double es = static_cast<double>(dtype_size(dt));
    const double n = static_cast<double>(g.N) * g.H * g.W * g.C, no = static_cast<double>(g.N) * g.OH * g.OW * g.C;
    const BandwidthReport report{copy_gbs(s, t, static_cast<size_t>(n * es)), rows, "gpu_rowwise"};
    std::printf("\nGPU max_pool2d 3x3/2 pad 1, [256, 112, 112, 64] NHWC     dtype   ms      GB/s  %% of copy (copy: %.0f GB/s)\n",
                report.roof);
    Tensor x = randn({g.N, g.H, g.W, g.C}, gen, dt, d), dy = randn({g.N, g.OH, g.OW, g.C}, gen, dt, d);
    Tensor y = Tensor::empty({g.N, g.OH, g.OW, g.C}, dt, d), dx = Tensor::empty_like(x);
    Tensor argmax = Tensor::empty({g.N, g.OH, g.OW, g.C}, DType::I32, d);
    report("max_pool2d fwd (read x, write y, argmax)", "bf16",
           median_ms(s, t, [&] { kernels::max_pool2d_forward_cuda(x, g, y, argmax); }), n * es + no * (es + 4));
    report("max_pool2d bwd (read dy, argmax, write dx)", "bf16",
           median_ms(s, t, [&] { kernels::max_pool2d_backward_cuda(dy, argmax, g, dx); }), no * (es + 4) + n * es);
  }
}

inline void rowwise_part(const Timing& t, nlohmann::json& rows) {
  tandem::autograd::NoGradGuard no_grad;
  RowwiseBench b{t, rows};
  b.layer_norm_rows();
  b.softmax_rows();
  b.max_pool_rows();
}

}  // namespace bench
