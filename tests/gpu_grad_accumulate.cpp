// tests/gpu_grad_accumulate.cpp: on the GPU, conv backward data adding into autograd's pending
// gradient with cuDNN's beta = 1 (core/autograd.h pending_gradient, BackendConfig::
// fused_grad_accumulation; the CPU side is tests/test_grad_accumulate.cpp):
//  - on vs off: the same gradients within one rounding of the dtype (f32, bf16, f16);
//  - on: the engine adds nothing, and the beta = 1 plan actually ran (ops::conv_dgrad_accumulate_stats),
//    so "no separate add" cannot pass while the add still runs;
//  - two ResNet blocks (a downsample shortcut, then an identity one), whose BNs all run fused with
//    their ReLU (batchnorm_cudnn_stats printed and checked).
// Exits 77 (Skipped) without a GPU. Written without a GPU (2026-11-25): compiled, never run.
#include <doctest/doctest.h>

#include <cstdio>
#include <functional>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops/ops.h"
#include "core/random.h"
#include "layers/models/resnet.h"
#include "tests/support/parity.h"

using namespace tandem;
using namespace tandem::testing::parity_names;

namespace {

// Standard normal values drawn on the CPU (the same on every machine), rounded to dt, on the GPU.
Tensor gpu_randn(const Shape& s, uint64_t seed, DType dt = DType::F32) {
  Generator g(seed);
  return ops::cast_raw(randn(s, g), dt).to(Device::cuda(0));
}

}  // namespace

TEST_CASE("conv backward data adds into the pending gradient (beta = 1): on vs off, f32/bf16/f16, and ResNet blocks") {
  // BackendConfig::fused_grad_accumulation on: where a tensor's second gradient is a conv's dx, cuDNN
  // blends it into the first (beta = 1) and the engine adds nothing. Off: a fresh dx and the
  // engine's add. The two differ by where the sum is rounded (on: pending + f32 dgrad, rounded
  // once; off: dgrad rounded to the dtype, then the sum rounded) and by the conv engines' summation
  // order (the beta = 1 plan may be another engine); f32 strict (no TF32).
  Tf32Scope strict(false);
  const PerDtype tol{
      .f32 = {1e-5, 1e-6, "conv engines' f32 summation order (another plan for beta = 1)"},
      .bf16 = {1e-2, 1e-3, "one bf16 rounding of the sum fewer (2^-8 relative)"},
      .f16 = {2e-3, 1e-4, "one f16 rounding of the sum fewer (2^-10 relative)"}};
  struct Result {
    std::vector<Tensor> grads;
    uint64_t engine_sums = 0;
    int64_t in_kernel = 0, added = 0;
  };
  // Runs backward of loss(on) and counts what summed the gradients.
  auto measure = [](bool on, const std::function<std::vector<Tensor>()>& step) {
    BackendScope acc(&BackendConfig::fused_grad_accumulation, on);
    const uint64_t sums = autograd::gradient_sums();
    const ops::ConvDgradAccumulateStats before = ops::conv_dgrad_accumulate_stats();
    Result r;
    r.grads = step();
    const ops::ConvDgradAccumulateStats after = ops::conv_dgrad_accumulate_stats();
    r.engine_sums = autograd::gradient_sums() - sums;
    r.in_kernel = after.in_kernel - before.in_kernel;
    r.added = after.added - before.added;
    return r;
  };
  auto check_pair = [](const Result& on, const Result& off, int64_t meetings, const Tolerance& t) {
    std::printf("  engine adds on %llu off %llu; dgrad accumulated in kernel %lld, added %lld\n",
                static_cast<unsigned long long>(on.engine_sums), static_cast<unsigned long long>(off.engine_sums),
                static_cast<long long>(on.in_kernel), static_cast<long long>(on.added));
    CHECK(off.engine_sums == static_cast<uint64_t>(meetings));
    CHECK(on.engine_sums == 0);
    CHECK(off.in_kernel + off.added == 0);
    // An engine-less beta = 1 would bring the add pass back: worth a failure, not a note.
    CHECK_MESSAGE(on.in_kernel == meetings, "no cuDNN engine took backward data with beta = 1 (see stderr)");
    REQUIRE(on.grads.size() == off.grads.size());
    for (size_t i = 0; i < on.grads.size(); ++i) {
      INFO("gradient ", i);
      CHECK(compare_values("grad", off.grads[i].to(Device::cpu()).to_vector(),
                           on.grads[i].to(Device::cpu()).to_vector(), t) == "");
    }
  };
  for (DType dt : kDtypes) {  // h = 1.5 x feeds a 3x3 conv and a shortcut: one meeting
    INFO(dtype_name(dt));
    auto step = [dt] {
      Tensor x = gpu_randn({4, 8, 8, 16}, 61, dt).set_requires_grad(true);
      Tensor w = gpu_randn({16, 3, 3, 16}, 62, dt).set_requires_grad(true);
      ops::Conv2dParams p;
      p.pad_h = p.pad_w = 1;
      Tensor h = ops::scale(x, 1.5f);
      Tensor branch = ops::conv2d(h, w, Tensor(), p);  // recorded before the shortcut: its dx comes second
      Tensor y = ops::add(branch, ops::scale(h, 0.5f));
      ops::sum(ops::mul(y, gpu_randn(y.shape(), 63, dt))).backward();
      return std::vector<Tensor>{x.grad(), w.grad()};
    };
    check_pair(measure(true, step), measure(false, step), 1, tol(dt));
  }
  for (bool bottleneck : {false, true}) {  // two blocks: a downsample shortcut, then an identity one
    INFO((bottleneck ? "Bottleneck" : "BasicBlock"));
    auto step = [bottleneck] {
      auto ds = std::make_shared<Sequential>();
      Conv2dOptions o;
      o.stride = 2;
      o.bias = false;
      const int64_t out = bottleneck ? 32 : 8;
      ds->add(std::make_shared<Conv2d>(16, out, 1, o, nullptr));
      ds->add(std::make_shared<BatchNorm2d>(out));
      Sequential net;
      if (bottleneck) {
        net.add(std::make_shared<models::Bottleneck>(16, 8, 2, ds));
        net.add(std::make_shared<models::Bottleneck>(32, 8, 1, nullptr));
      } else {
        net.add(std::make_shared<models::BasicBlock>(16, 8, 2, ds));
        net.add(std::make_shared<models::BasicBlock>(8, 8, 1, nullptr));
      }
      Generator g(7);
      for (auto& [_, p] : net.named_parameters()) p.detach().copy_(ops::scale(randn(p.shape(), g), 0.3f));
      net.to(Device::cuda(0));
      Tensor x = gpu_randn({4, 8, 8, 16}, 21).set_requires_grad(true);
      Tensor y = net(x);
      ops::sum(ops::mul(y, gpu_randn(y.shape(), 22))).backward();
      std::vector<Tensor> grads{x.grad()};
      for (auto& [_, p] : net.named_parameters()) grads.push_back(p.grad());
      return grads;
    };
    const ops::BatchNormCudnnStats bn0 = ops::batchnorm_cudnn_stats();
    const Result on = measure(true, step);
    const ops::BatchNormCudnnStats bn1 = ops::batchnorm_cudnn_stats();
    // Every BN of the blocks but the downsample's runs with its ReLU: the inner stages as BN_ACTIVATION
    // (1 per BasicBlock, 2 per Bottleneck), the tails as BN_ADD_ACTIVATION, so no ReLU pass is left.
    // f32 is off cuDNN's documented fast path (CUDNN_DATA_HALF), so a refusal only warns here; the fp16
    // shapes above must not be refused.
    const int64_t inner = bottleneck ? 4 : 2;
    std::printf("  blocks: BN+ReLU forward %lld backward %lld (of %lld), BN+add+ReLU forward %lld (of 2)\n",
                static_cast<long long>(bn1.forward_relu - bn0.forward_relu),
                static_cast<long long>(bn1.backward_relu - bn0.backward_relu), static_cast<long long>(inner),
                static_cast<long long>(bn1.forward_fused - bn0.forward_fused));
    CHECK(bn1.backward_relu - bn0.backward_relu == bn1.forward_relu - bn0.forward_relu);
    WARN(bn1.forward_relu - bn0.forward_relu == inner);
    WARN(bn1.forward_fused - bn0.forward_fused == 2);
    // BN's backward cancellation amplifies the summation-order noise: gpu_opsa_parity's f32 BN tolerance.
    check_pair(on, measure(false, step), 2,
               {1e-4, 2e-5, "conv summation order through the blocks' BN backward cancellation"});
  }
}
