// tests/gpu_amp_parity.cpp: the AMP step on CUDA against the CPU (exits 77, Skipped, without a GPU).
//
//  - The fused unscale + inf/NaN check (one multi-tensor launch per dtype, optim/cuda/amp.cu) on
//    sizes below, at and above one 32768-element chunk: the unscaled f32 values must EQUAL the CPU's
//    (both compute float(g) * inv_scale, one f32 multiply), and an inf or NaN placed in any one
//    tensor - last element of the last chunk included - must be found.
//  - Whole AMP steps (cast model, scaled loss, backward, unscale, SGD on the masters, copy back) of
//    the small CNN with BatchNorm for bf16 and f16: GPU and CPU parameters after 3 steps agree within
//    16-bit tolerance - the GPU's cuDNN/cuBLAS paths round at other points than the CPU's f32
//    reference, and the parameters are 16-bit (1 ulp = 2^-8 bf16, 2^-11 f16 relative): 3e-2 / 1e-2
//    relative, norm-wise per tensor, as tests/support/ddp_fixture.h measures GPU libraries.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/ops/ops.h"
#include "core/random.h"
#include "layers/amp_cast.h"
#include "layers/models/models.h"
#include "optim/amp.h"
#include "tests/support/parity.h"

using namespace tandem;

namespace {

const std::vector<int64_t> kSizes{1, 300, 32768, 70001};

std::vector<Tensor> grads(Device dev, DType t, int64_t bad_tensor, float bad_value) {
  Generator g(5);
  std::vector<Tensor> out;
  for (size_t i = 0; i < kSizes.size(); ++i) {
    std::vector<float> v = randn({kSizes[i]}, g).to_vector();
    for (float& x : v) x *= 1000.0f;
    if (static_cast<int64_t>(i) == bad_tensor) v.back() = bad_value;
    out.push_back(ops::cast_raw(Tensor::from_vector(v, {kSizes[i]}), t).to(dev));
  }
  return out;
}

optim::MasterWeights masters_for(Device dev, DType t) {
  optim::NamedTensors named;
  for (size_t i = 0; i < kSizes.size(); ++i)
    named.emplace_back("p" + std::to_string(i), ops::cast_raw(Tensor::zeros({kSizes[i]}), t).to(dev));
  return optim::MasterWeights(optim::segments_from_parameters(named));
}

// Three AMP steps of small_cnn on `dev`; the parameters afterwards, widened to f32 on the host.
std::vector<std::vector<float>> train(Device dev, DType t) {
  ModulePtr model = models::create_model("small_cnn", 4, 3);
  model->to(dev);
  cast_for_amp(*model, t);
  auto named = model->named_parameters();
  optim::MasterWeights mw(optim::segments_from_parameters(named));
  optim::OptimizerOptions oo;
  oo.lr = 0.05;
  oo.momentum = 0.9;
  auto opt = optim::make_optimizer("sgd", mw.master_segments(), static_cast<int64_t>(named.size()), oo);
  optim::LossScalerOptions so;
  so.enabled = t == DType::F16;
  optim::LossScaler scaler(so);
  Generator g(11);
  Tensor x = randn({8, 16, 16, 3}, g), y = Tensor::from_vector_i64({0, 1, 2, 3, 0, 1, 2, 3}, {8});
  for (int s = 0; s < 3; ++s) {
    model->zero_grad();
    Tensor loss = ops::cross_entropy((*model)(ops::cast_raw(x, t).to(dev)), y.to(dev));
    ops::scale(loss, static_cast<float>(scaler.scale())).backward();
    CHECK(optim::amp_step(mw, scaler, *opt, mw.model_grads()));
  }
  std::vector<std::vector<float>> out;
  for (const auto& [_, p] : named) out.push_back(p.to(Device::cpu()).to_vector());
  return out;
}

}  // namespace

TEST_CASE("fused unscale + inf/NaN check: CUDA equals the CPU and finds every non-finite value") {
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    CAPTURE(dtype_name(t));
    optim::MasterWeights cpu = masters_for(Device::cpu(), t), gpu = masters_for(Device::cuda(0), t);
    CHECK_FALSE(cpu.unscale_and_check(grads(Device::cpu(), t, -1, 0), 1.0 / 1024));
    CHECK_FALSE(gpu.unscale_and_check(grads(Device::cuda(0), t, -1, 0), 1.0 / 1024));
    for (size_t i = 0; i < kSizes.size(); ++i)
      CHECK(gpu.master_grads()[i].to(Device::cpu()).to_vector() == cpu.master_grads()[i].to_vector());
    for (int64_t bad = 0; bad < static_cast<int64_t>(kSizes.size()); ++bad)
      for (float v : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
        CAPTURE(bad);
        CHECK(gpu.unscale_and_check(grads(Device::cuda(0), t, bad, v), 1.0 / 65536));
      }
  }
}

TEST_CASE("AMP steps of small_cnn: CUDA parameters match the CPU's within 16-bit tolerance") {
  for (DType t : {DType::BF16, DType::F16}) {
    CAPTURE(dtype_name(t));
    auto cpu = train(Device::cpu(), t), gpu = train(Device::cuda(0), t);
    const double bound = t == DType::BF16 ? 3e-2 : 1e-2;
    REQUIRE(cpu.size() == gpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      double num = 0, den = 0;
      for (size_t k = 0; k < cpu[i].size(); ++k) {
        num = std::max(num, static_cast<double>(std::fabs(gpu[i][k] - cpu[i][k])));
        den = std::max(den, static_cast<double>(std::fabs(cpu[i][k])));
      }
      CAPTURE(i);
      CHECK(num <= bound * std::max(den, 1e-6));
    }
  }
}
