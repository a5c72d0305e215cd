// apps/bench_ops_conv_fusion.h: bench_ops' rows for the conv fusions (included only by
// apps/bench_ops.cpp, CUDA builds), each next to the op sequence it replaces, forward under no-grad
// and forward + backward through autograd (inputs and parameters require grad; .grad reset each
// run). The ratio columns are unfused ms / fused ms (> 1: the fusion pays). A "fallback" note means
// a graph was refused for that shape (the op's GraphFusionStats), so the fused row measured its
// other path. Not yet run: written in a session without a GPU.
//   conv_bias_relu_part: conv2d_bias_relu (one cuDNN graph forward; mask + bias gradient in one
//     backward pass) vs relu(conv2d(x, w, b)), at VGG16's and AlexNet's layer shapes.
//   conv_bn_relu_part: conv2d_genstats -> bn_finalize -> batch_norm_apply (BackendConfig::
//     conv_bn_fusion on) vs relu(batch_norm(conv2d(x, w))), at ResNet-50's conv -> BN -> ReLU shapes;
//     then a ResNet-50 bottleneck's inner stages with the prologue (conv1 with genstats, bn1 + ReLU in
//     conv2's prologue, bn2 + ReLU in conv3's: conv2d_bn_relu_genstats) vs today's default
//     conv2d -> batch_norm_relu -> conv2d -> batch_norm_relu -> conv2d, up to conv3's output.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "apps/bench_ops_gpu.h"
#include "core/autograd.h"
#include "core/cuda/context.h"
#include "core/ops/ops.h"

namespace bench {

// One row: `fused` and `unfused` (each returns the op's output) timed forward under no-grad and
// forward + backward (the `leaves` require grad from then on, their .grad reset before each run),
// printed with both ratios and a fallback note from `stats` (the fused op's GraphFusionStats).
template <class Fused, class Unfused>
void fused_vs_unfused(const Timing& t, nlohmann::json& rows, const char* part, const char* name, tandem::DType dt,
                      int64_t batch, std::initializer_list<tandem::Tensor*> leaves, Fused fused, Unfused unfused,
                      tandem::ops::GraphFusionStats (*stats)()) {
  using namespace tandem;
  cudaStream_t s = cuda::compute_stream();
  const char* label = dt == DType::BF16 ? "bf16" : "f32";
  const ops::GraphFusionStats before = stats();
  double ff = -1, fu = -1, bf = -1, bu = -1;
  try {  // a shape cuDNN has no engine for skips the row, not the run
    {
      autograd::NoGradGuard no_grad;
      ff = median_ms(s, t, [&] { fused(); });
      fu = median_ms(s, t, [&] { unfused(); });
    }
    for (Tensor* l : leaves) l->set_requires_grad(true);
    const Tensor y0 = fused();
    Tensor dy = Tensor::full(y0.shape(), 0.01, dt, y0.device());
    auto reset = [&] { for (Tensor* l : leaves) l->set_grad(Tensor()); };
    bf = median_ms(s, t, [&] { reset(); autograd::backward({fused()}, {dy}); });
    bu = median_ms(s, t, [&] { reset(); autograd::backward({unfused()}, {dy}); });
  } catch (const Error& e) {
    std::printf("  %-40s %-5s n/a: %s\n", name, label, e.what());
    rows.push_back({{"part", part}, {"name", name}, {"dtype", label}, {"error", e.what()}});
    return;
  }
  const bool fallback = stats().unfused != before.unfused;
  std::printf("  %-40s %-5s %12.3f  %14.3f  %5.2f  %12.3f  %14.3f  %5.2f%s\n", name, label, ff, fu, fu / ff, bf, bu,
              bu / bf, fallback ? "  (fallback)" : "");
  rows.push_back({{"part", part}, {"name", name}, {"dtype", label}, {"batch", batch}, {"fused_fwd_ms", ff},
                  {"unfused_fwd_ms", fu}, {"fwd_ratio", fu / ff}, {"fused_fwd_bwd_ms", bf}, {"unfused_fwd_bwd_ms", bu},
                  {"fwd_bwd_ratio", bu / bf}, {"fallback", fallback}});
}

inline const char* kFusionColumns = "dtype  fused fwd ms  unfused fwd ms  ratio  fused f+b ms  unfused f+b ms  ratio";

inline void conv_bias_relu_part(const Timing& t, nlohmann::json& rows, int64_t batch) {
  using namespace tandem;
  const Device d = Device::cuda(cuda::current_device());
  struct Layer {
    const char* name;
    int64_t hw, c, o, k, stride, pad;
  };
  const Layer layers[] = {
      {"vgg16 conv1_2 3x3 64->64 @224", 224, 64, 64, 3, 1, 1},   {"vgg16 conv2_2 3x3 128->128 @112", 112, 128, 128, 3, 1, 1},
      {"vgg16 conv3_2 3x3 256->256 @56", 56, 256, 256, 3, 1, 1}, {"vgg16 conv4_2 3x3 512->512 @28", 28, 512, 512, 3, 1, 1},
      {"vgg16 conv5_2 3x3 512->512 @14", 14, 512, 512, 3, 1, 1}, {"alexnet conv1 11x11/4 3->64 @224", 224, 3, 64, 11, 4, 2},
      {"alexnet conv2 5x5 64->192 @27", 27, 64, 192, 5, 1, 2},   {"alexnet conv3 3x3 192->384 @13", 13, 192, 384, 3, 1, 1},
  };
  std::printf("\nGPU conv + bias + ReLU, batch %lld            %s\n", static_cast<long long>(batch), kFusionColumns);
  for (DType dt : {DType::F32, DType::BF16})
    for (const Layer& l : layers) {
      Tensor x = Tensor::full({batch, l.hw, l.hw, l.c}, 0.01, dt, d), w = Tensor::full({l.o, l.k, l.k, l.c}, 0.01, dt, d);
      Tensor b = Tensor::full({l.o}, 0.01, dt, d);
      ops::Conv2dParams p;
      p.stride_h = p.stride_w = static_cast<int>(l.stride);
      p.pad_h = p.pad_w = static_cast<int>(l.pad);
      fused_vs_unfused(
          t, rows, "gpu_conv_bias_relu", l.name, dt, batch, {&x, &w, &b},
          [&] { return ops::conv2d_bias_relu(x, w, b, p); }, [&] { return ops::relu(ops::conv2d(x, w, b, p)); },
          ops::conv_bias_relu_stats);
    }
}

inline void conv_bn_relu_part(const Timing& t, nlohmann::json& rows, int64_t batch) {
  using namespace tandem;
  const Device d = Device::cuda(cuda::current_device());
  struct Layer {
    const char* name;
    int64_t hw, c, o, k, stride;
  };
  const Layer layers[] = {{"resnet50 stem 7x7/2 3->64 @224", 224, 3, 64, 7, 2},
                          {"resnet50 1x1 256->64 @56", 56, 256, 64, 1, 1},
                          {"resnet50 3x3 64->64 @56", 56, 64, 64, 3, 1},
                          {"resnet50 3x3 256->256 @14", 14, 256, 256, 3, 1}};
  std::printf("\nGPU conv -> BN -> ReLU, batch %lld            %s\n", static_cast<long long>(batch), kFusionColumns);
  BackendScope scope(&BackendConfig::conv_bn_fusion, true);  // the unfused sequence never reads it
  for (DType dt : {DType::F32, DType::BF16})
    for (const Layer& l : layers) {
      Tensor x = Tensor::full({batch, l.hw, l.hw, l.c}, 0.01, dt, d), w = Tensor::full({l.o, l.k, l.k, l.c}, 0.01, dt, d);
      Tensor gamma = Tensor::ones({l.o}, DType::F32, d), beta = Tensor::zeros({l.o}, DType::F32, d);
      Tensor rm = Tensor::zeros({l.o}, DType::F32, d), rv = Tensor::ones({l.o}, DType::F32, d);
      ops::Conv2dParams p;
      p.stride_h = p.stride_w = static_cast<int>(l.stride);
      p.pad_h = p.pad_w = static_cast<int>(l.k / 2);
      auto fused = [&] {
        ops::ConvGenstats cs = ops::conv2d_genstats(x, w, p);
        return ops::batch_norm_apply(cs.y, ops::bn_finalize(cs.stats, gamma, beta, rm, rv), gamma, beta, true);
      };
      auto unfused = [&] { return ops::relu(ops::batch_norm(ops::conv2d(x, w, Tensor(), p), gamma, beta, rm, rv, true)); };
      fused_vs_unfused(t, rows, "gpu_conv_bn_relu", l.name, dt, batch, {&x, &w, &gamma, &beta}, fused, unfused,
                       ops::conv_bn_fusion_stats);
    }

  struct Stage {
    const char* name;
    int64_t hw, in, width;  // a bottleneck: 1x1 in->width, 3x3 width->width, 1x1 width->4 width
  };
  const Stage stages[] = {{"resnet50 layer1 bottleneck @56", 56, 256, 64},
                          {"resnet50 layer3 bottleneck @14", 14, 1024, 256}};
  std::printf("\nGPU ResNet-50 bottleneck conv1..conv3 with the BN + ReLU prologue, batch %lld  %s\n",
              static_cast<long long>(batch), kFusionColumns);
  for (DType dt : {DType::F32, DType::BF16})
    for (const Stage& st : stages) {
      const int64_t c[3][2] = {{st.in, st.width}, {st.width, st.width}, {st.width, 4 * st.width}};
      const int k[3] = {1, 3, 1};
      Tensor x = Tensor::full({batch, st.hw, st.hw, st.in}, 0.01, dt, d);
      Tensor w[3], gamma[2], beta[2], rm[2], rv[2];
      ops::Conv2dParams p[3];
      for (int i = 0; i < 3; ++i) {
        w[i] = Tensor::full({c[i][1], k[i], k[i], c[i][0]}, 0.01, dt, d);
        p[i].pad_h = p[i].pad_w = k[i] / 2;
      }
      for (int i = 0; i < 2; ++i) {
        gamma[i] = Tensor::ones({st.width}, DType::F32, d), beta[i] = Tensor::zeros({st.width}, DType::F32, d);
        rm[i] = Tensor::zeros({st.width}, DType::F32, d), rv[i] = Tensor::ones({st.width}, DType::F32, d);
      }
      auto fused = [&] {
        ops::ConvGenstats cs = ops::conv2d_genstats(x, w[0], p[0]);
        for (int i = 0; i < 2; ++i) {
          ops::BnFinalized fin = ops::bn_finalize(cs.stats, gamma[i], beta[i], rm[i], rv[i]);
          cs = ops::conv2d_bn_relu_genstats({cs.y, fin, gamma[i], beta[i]}, w[i + 1], p[i + 1]);
        }
        return cs.y;
      };
      auto unfused = [&] {
        Tensor h = x;
        for (int i = 0; i < 2; ++i)
          h = ops::batch_norm_relu(ops::conv2d(h, w[i], Tensor(), p[i]), gamma[i], beta[i], rm[i], rv[i], true, 0.1,
                                   1e-5);
        return ops::conv2d(h, w[2], Tensor(), p[2]);
      };
      fused_vs_unfused(t, rows, "gpu_conv_bn_prologue", st.name, dt, batch,
                       {&x, &w[0], &w[1], &w[2], &gamma[0], &beta[0], &gamma[1], &beta[1]}, fused, unfused,
                       ops::conv_bn_fusion_stats);
    }
}

}  // namespace bench
