// apps/bench_ops_bandwidth.h: bench_ops' memory-bound rows (included only by apps/bench_ops.cpp,
// CUDA builds).
//
// BatchNorm, elementwise maps, pooling, the bias gradient and the fused SGD step do a few flops per
// byte, so their baseline is not a library but the memory system: each row prints the op's
// achieved bandwidth (the bytes it must move at minimum / median time) next to the bandwidth of a
// device-to-device cudaMemcpyAsync of the same order of size, measured in the same run (the
// practical roofline; an H100 SXM reaches ~2.6-3 TB/s of its 3.35 TB/s peak). "% of copy" near
// 100 means the kernel is as fast as the hardware allows; well below it means launch overhead,
// poor coalescing or extra passes.
// Byte counts are the algorithmic minimum (each input read once, each output written once),
// written next to each row; a multi-pass kernel (BN: statistics then normalise) therefore shows
// its extra passes as lost bandwidth, which is the point.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/bench_ops_gpu.h"
#include "core/backend.h"
#include "core/autograd.h"
#include "core/cuda/context.h"
#include "core/ops/ops.h"
#include "optim/sgd.h"

namespace bench {

// GB/s of a device-to-device copy of `bytes` (read + write = 2 x bytes moved).
inline double copy_gbs(cudaStream_t s, const Timing& t, size_t bytes) {
  Buffer a(bytes), b(bytes);
  double ms = median_ms(s, t, [&] { CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, s)); });
  return 2.0 * static_cast<double>(bytes) / ms / 1e6;
}

// One row of a bandwidth part: prints the name, dtype, median ms, the achieved GB/s (minimum bytes /
// time) and its % of the copy roofline `roof`, and records the row in `rows` under `part`.
struct BandwidthReport {
  double roof;
  nlohmann::json& rows;
  const char* part;
  void operator()(const std::string& name, const char* dtype, double ms, double bytes) const {
    const double gbs = bytes / ms / 1e6;
    std::printf("  %-46s %-5s %7.3f  %7.0f  %5.1f\n", name.c_str(), dtype, ms, gbs, 100.0 * gbs / roof);
    rows.push_back({{"part", part}, {"name", name}, {"dtype", dtype}, {"ms", ms}, {"bytes", bytes},
                    {"gbs", gbs}, {"copy_gbs", roof}, {"fraction_of_copy", gbs / roof}});
  }
};

inline void bandwidth_part(const Timing& t, nlohmann::json& rows) {
  using namespace tandem;
  cudaStream_t s = cuda::compute_stream();
  const Device d = Device::cuda(cuda::current_device());
  // ResNet-50's first stage at batch 32: [32, 56, 56, 256] NHWC, 25.7M elements (~100 MB in f32).
  const int64_t N = 32, H = 56, W = 56, C = 256, n = N * H * W * C;
  const double roof = copy_gbs(s, t, static_cast<size_t>(n) * 4);
  std::printf("\nGPU memory-bound ops, [%lld, %lld, %lld, %lld] NHWC      dtype   ms      GB/s  %% of copy (copy: %.0f GB/s)\n",
              (long long)N, (long long)H, (long long)W, (long long)C, roof);
  const BandwidthReport report{roof, rows, "gpu_bandwidth"};
  for (DType dt : {DType::F32, DType::BF16}) {
    const char* label = dt == DType::BF16 ? "bf16" : "f32";
    const double es = static_cast<double>(dtype_size(dt));
    Tensor x = Tensor::full({N, H, W, C}, 0.01, dt, d), x2 = x.clone(), bias = Tensor::full({C}, 0.01, dt, d);
    Tensor dy = Tensor::full({N, H, W, C}, 0.01, dt, d);
    {
      autograd::NoGradGuard no_grad;
      report("relu (read x, write y)", label, median_ms(s, t, [&] { ops::relu(x); }), 2 * n * es);
      report("relu_ in place (read x, write x)", label, median_ms(s, t, [&] { ops::relu_(x2); }), 2 * n * es);
      report("add, same shape (read 2, write 1)", label, median_ms(s, t, [&] { ops::add(x, x2); }), 3 * n * es);
      report("add bias [C] (read x, write y)", label, median_ms(s, t, [&] { ops::add(x, bias); }), 2 * n * es);
      report("bias gradient: column sum over N*H*W (read dy)", label,
             median_ms(s, t, [&] { ops::sum_to_trailing(dy, {C}); }), n * es);
      ops::Pool2dParams p;
      p.kernel_h = p.kernel_w = 3;
      p.pad_h = p.pad_w = 1;  // ResNet's stem pool: 3x3/2, pad 1 -> [N, 28, 28, C]
      report("max_pool2d 3x3/2 forward (read x, write y/4)", label, median_ms(s, t, [&] { ops::max_pool2d(x, p); }),
             (n + n / 4) * es);
    }
    // BatchNorm, training: the minimum is one read of x and one write of y (forward), and reads of
    // dy and x plus a write of dx (backward); the statistics pass is the extra read.
    // Both implementations (BackendConfig::cudnn_batchnorm): cuDNN's, the default, and tandem's kernels.
    Tensor w = Tensor::ones({C}, DType::F32, d), b = Tensor::zeros({C}, DType::F32, d);
    Tensor rm = Tensor::zeros({C}, DType::F32, d), rv = Tensor::ones({C}, DType::F32, d);
    for (bool cudnn : {true, false}) {
      BackendConfig bc = backend();
      bc.cudnn_batchnorm = cudnn;
      BackendScope scope(bc);
      const std::string impl = cudnn ? ", cuDNN" : ", tandem";
      {
        autograd::NoGradGuard no_grad;
        report("batch_norm fwd, training (read x, write y)" + impl, label,
               median_ms(s, t, [&] { ops::batch_norm(x, w, b, rm, rv, true); }), 2 * n * es);
        // The ResNet block tail: cuDNN fuses it into one op; tandem composes BN, add and ReLU.
        report("bn + add + relu fwd (read x, z, write y)" + impl, label,
               median_ms(s, t, [&] { ops::batch_norm_add_relu(x, x2, w, b, rm, rv, true); }), 3 * n * es);
        // Every other conv -> BN -> ReLU: cuDNN's BN_ACTIVATION; tandem composes BN and ReLU in place.
        report("bn + relu fwd (read x, write y)" + impl, label,
               median_ms(s, t, [&] { ops::batch_norm_relu(x, w, b, rm, rv, true); }), 2 * n * es);
      }
      Tensor xg = x.clone();
      xg.set_requires_grad(true);
      double fb = median_ms(s, t, [&] {
        Tensor y = ops::batch_norm(xg, w, b, rm, rv, true);
        autograd::backward({y}, {dy});
      });
      report("batch_norm fwd + bwd (5 passes min.)" + impl, label, fb, 5 * n * es);
    }
  }
  // Fused SGD with momentum and weight decay over ResNet-50's 25.6M parameters in one tensor per
  // ~1M (the multi-tensor launch): reads p, g, buf and writes p, buf = 5 x 4 bytes per parameter.
  {
    std::vector<Tensor> params;
    const int64_t per = 1 << 20, count = 25;
    for (int64_t i = 0; i < count; ++i) {
      Tensor p = Tensor::full({per}, 0.01, DType::F32, d);
      p.set_requires_grad(true);
      p.set_grad(Tensor::full({per}, 0.001, DType::F32, d));
      params.push_back(p);
    }
    optim::SGDOptions so;
    so.momentum = 0.9;
    so.weight_decay = 1e-4;
    optim::SGD sgd(params, so);
    report("fused SGD step, momentum + wd (25 x 1M params)", "f32", median_ms(s, t, [&] { sgd.step(); }),
           5.0 * 4.0 * per * count);
  }
}

}  // namespace bench
