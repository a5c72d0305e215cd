// apps/bench_ops_conv_fusion.h: bench_ops' rows for conv2d_bias_relu (included only by
// apps/bench_ops.cpp, CUDA builds): the fused op (one cuDNN graph forward; mask + bias gradient in
// one backward pass) next to relu(conv2d(x, w, b)), at VGG16's and AlexNet's layer shapes, forward
// under no-grad and forward + backward through autograd (x, w, b require grad; .grad reset each
// run). The ratio column is unfused ms / fused ms (> 1: the fusion pays). A "fallback" note means
// the graph was refused for that shape (ops::conv_bias_relu_stats), so the fused row measured the
// conv + one bias+ReLU pass instead. Not yet run: written in a session without a GPU.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "apps/bench_ops_gpu.h"
#include "core/autograd.h"
#include "core/cuda/context.h"
#include "core/ops/ops.h"

namespace bench {

inline void conv_bias_relu_part(const Timing& t, nlohmann::json& rows, int64_t batch) {
  using namespace tandem;
  cudaStream_t s = cuda::compute_stream();
  const Device d = Device::cuda(cuda::current_device());
  struct Shape4 {
    const char* name;
    int64_t hw, c, o, k, stride, pad;
  };
  const Shape4 shapes[] = {
      {"vgg16 conv1_2 3x3 64->64 @224", 224, 64, 64, 3, 1, 1},   {"vgg16 conv2_2 3x3 128->128 @112", 112, 128, 128, 3, 1, 1},
      {"vgg16 conv3_2 3x3 256->256 @56", 56, 256, 256, 3, 1, 1}, {"vgg16 conv4_2 3x3 512->512 @28", 28, 512, 512, 3, 1, 1},
      {"vgg16 conv5_2 3x3 512->512 @14", 14, 512, 512, 3, 1, 1}, {"alexnet conv1 11x11/4 3->64 @224", 224, 3, 64, 11, 4, 2},
      {"alexnet conv2 5x5 64->192 @27", 27, 64, 192, 5, 1, 2},   {"alexnet conv3 3x3 192->384 @13", 13, 192, 384, 3, 1, 1},
  };
  std::printf("\nGPU conv + bias + ReLU, batch %lld           dtype  fused fwd ms  unfused fwd ms  ratio  "
              "fused f+b ms  unfused f+b ms  ratio\n", static_cast<long long>(batch));
  for (DType dt : {DType::F32, DType::BF16}) {
    const char* label = dt == DType::BF16 ? "bf16" : "f32";
    for (const Shape4& c : shapes) {
      Tensor x = Tensor::full({batch, c.hw, c.hw, c.c}, 0.01, dt, d), w = Tensor::full({c.o, c.k, c.k, c.c}, 0.01, dt, d);
      Tensor b = Tensor::full({c.o}, 0.01, dt, d);
      ops::Conv2dParams p;
      p.stride_h = p.stride_w = static_cast<int>(c.stride);
      p.pad_h = p.pad_w = static_cast<int>(c.pad);
      const ops::ConvBiasReluStats before = ops::conv_bias_relu_stats();
      double ff = -1, fu = -1, bf = -1, bu = -1;
      try {
        {
          autograd::NoGradGuard no_grad;
          ff = median_ms(s, t, [&] { ops::conv2d_bias_relu(x, w, b, p); });
          fu = median_ms(s, t, [&] { ops::relu(ops::conv2d(x, w, b, p)); });
        }
        for (Tensor* l : {&x, &w, &b}) l->set_requires_grad(true);
        Tensor y0 = ops::conv2d_bias_relu(x, w, b, p);
        Tensor dy = Tensor::full(y0.shape(), 0.01, dt, d);
        auto reset = [&] { for (Tensor* l : {&x, &w, &b}) l->set_grad(Tensor()); };
        bf = median_ms(s, t, [&] { reset(); autograd::backward({ops::conv2d_bias_relu(x, w, b, p)}, {dy}); });
        bu = median_ms(s, t, [&] { reset(); autograd::backward({ops::relu(ops::conv2d(x, w, b, p))}, {dy}); });
      } catch (const Error& e) {
        std::printf("  %-40s %-5s n/a: %s\n", c.name, label, e.what());
        rows.push_back({{"part", "gpu_conv_bias_relu"}, {"name", c.name}, {"dtype", label}, {"error", e.what()}});
        continue;
      }
      const bool fallback = ops::conv_bias_relu_stats().unfused != before.unfused;
      std::printf("  %-40s %-5s %12.3f  %14.3f  %5.2f  %12.3f  %14.3f  %5.2f%s\n", c.name, label, ff, fu, fu / ff, bf,
                  bu, bu / bf, fallback ? "  (fallback)" : "");
      rows.push_back({{"part", "gpu_conv_bias_relu"}, {"name", c.name}, {"dtype", label}, {"batch", batch},
                      {"fused_fwd_ms", ff}, {"unfused_fwd_ms", fu}, {"fwd_ratio", fu / ff}, {"fused_fwd_bwd_ms", bf},
                      {"unfused_fwd_bwd_ms", bu}, {"fwd_bwd_ratio", bu / bf}, {"fallback", fallback}});
    }
  }
}

}  // namespace bench
