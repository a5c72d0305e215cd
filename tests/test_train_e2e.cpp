// tests/test_train_e2e.cpp: end to end on the CPU - a small CNN learns a generated image task.
//
// The task (made here, no files): 16x16 RGB images of oriented stripes, 4 classes by orientation
// (0, 45, 90, 135 degrees), with random frequency, phase, contrast and per-channel colour, plus
// Gaussian noise (sigma 1, as large as the stripes' amplitude of 0.5-1). Train and held-out sets are
// different random draws. A linear model on pixels cannot solve it (phase is random); a CNN can, so
// reaching >= 95% held-out accuracy shows that conv, BN, ReLU, pooling, linear, cross-entropy,
// autograd and SGD all work together. The time is printed, not asserted (it is ~1 s on 2 cores).
// The same run under mixed precision (bf16 and fp16: 16-bit model with f32 BatchNorm, f32 master
// weights, fp16 with dynamic loss scaling; optim/amp.h) must reach the same bar.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "core/autograd.h"
#include "core/ops/loss/loss.h"
#include "core/ops/copy/copy.h"
#include "core/ops/elementwise/elementwise.h"
#include "layers/amp_cast.h"
#include "layers/models/models.h"
#include "optim/amp.h"
#include "tests/support/amp_sgd.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"

using namespace tandem;
using tandem::testing::amp_sgd;
using tandem::testing::AmpSgd;

namespace {
constexpr int kSize = 16, kClasses = 4, kTrain = 768;

struct Set {
  Tensor images;  // [N, 16, 16, 3]
  Tensor labels;  // i64 [N]
};

Set make_set(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> px(static_cast<size_t>(n) * kSize * kSize * 3);
  std::vector<int64_t> labels(n);
  for (int i = 0; i < n; ++i) {
    int k = static_cast<int>(rng() % kClasses);
    labels[i] = k;
    float theta = static_cast<float>(M_PI) * k / kClasses;
    float freq = 0.15f + 0.1f * U(rng), phase = 6.2831853f * U(rng), amp = 0.5f + 0.5f * U(rng);
    float color[3] = {0.5f + U(rng), 0.5f + U(rng), 0.5f + U(rng)};
    for (int y = 0; y < kSize; ++y)
      for (int x = 0; x < kSize; ++x) {
        float s = amp * std::sin(6.2831853f * freq * (x * std::cos(theta) + y * std::sin(theta)) + phase);
        for (int c = 0; c < 3; ++c) px[((static_cast<size_t>(i) * kSize + y) * kSize + x) * 3 + c] = color[c] * s + noise(rng);
      }
  }
  return {Tensor::from_vector(px, {n, kSize, kSize, 3}), Tensor::from_vector_i64(labels, {n})};
}

double accuracy(Module& model, const Set& s, DType input = DType::F32) {
  autograd::NoGradGuard ng;
  model.eval();
  int64_t correct = ops::topk_correct(model(input == DType::F32 ? s.images : ops::cast_raw(s.images, input)), s.labels, 1);
  model.train();
  return static_cast<double>(correct) / static_cast<double>(s.labels.numel());
}
}  // namespace

TEST_CASE("small_cnn + SGD learns oriented stripes to >= 95% held-out accuracy") {
  Set train = make_set(kTrain, 1), test = make_set(512, 2);
  ModulePtr model = models::create_model("small_cnn", kClasses, 7);
  optim::SGDOptions so;
  so.lr = 0.05;
  so.momentum = 0.9;
  so.weight_decay = 5e-4;
  optim::SGD sgd(model->named_parameters(), so);
  const int batch = 32, epochs = 4, steps_per_epoch = kTrain / batch;
  optim::LrScheduleOptions lo;
  lo.base_lr = so.lr;
  lo.warmup_steps = steps_per_epoch / 2;
  lo.decay = optim::LrDecay::Cosine;
  lo.total_steps = epochs * steps_per_epoch;

  auto t0 = std::chrono::steady_clock::now();
  int64_t step = 0;
  double last_loss = 0;
  for (int e = 0; e < epochs; ++e) {
    for (int b = 0; b < steps_per_epoch; ++b, ++step) {
      Tensor x = train.images.slice(b * batch, (b + 1) * batch);
      Tensor y = train.labels.slice(b * batch, (b + 1) * batch);
      sgd.set_lr(optim::lr_at(lo, step));
      sgd.zero_grad();
      Tensor loss = ops::cross_entropy((*model)(x), y);
      loss.backward();
      sgd.step();
      last_loss = loss.item();
    }
    std::printf("epoch %d  loss %.4f  held-out acc %.3f\n", e, last_loss, accuracy(*model, test));
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double acc = accuracy(*model, test);
  std::printf("trained %lld steps in %.2f s; held-out accuracy %.3f (chance 0.25)\n",
              static_cast<long long>(step), secs, acc);
  CHECK(acc >= 0.95);
  CHECK(accuracy(*model, train) >= 0.95);
}

// The f32 recipe above with the model cast for AMP, f32 masters and (fp16) a dynamic loss scale.
TEST_CASE("small_cnn + SGD under AMP (bf16, fp16) reaches the same >= 95% bar") {
  Set train = make_set(kTrain, 1), test = make_set(512, 2);
  for (DType low : {DType::BF16, DType::F16}) {
    CAPTURE(dtype_name(low));
    ModulePtr model = models::create_model("small_cnn", kClasses, 7);
    cast_for_amp(*model, low);
    AmpSgd amp = amp_sgd(*model, low, 0.05, 0.9, 5e-4);  // the loss scale for fp16 only
    optim::LossScaler& scaler = amp.scaler;
    const int batch = 32, epochs = 4, steps_per_epoch = kTrain / batch;
    optim::LrScheduleOptions lo;
    lo.base_lr = 0.05;
    lo.warmup_steps = steps_per_epoch / 2;
    lo.decay = optim::LrDecay::Cosine;
    lo.total_steps = epochs * steps_per_epoch;
    Tensor images = ops::cast_raw(train.images, low);

    auto t0 = std::chrono::steady_clock::now();
    int64_t step = 0;
    for (int e = 0; e < epochs; ++e)
      for (int b = 0; b < steps_per_epoch; ++b, ++step) {
        Tensor x = images.slice(b * batch, (b + 1) * batch);
        Tensor y = train.labels.slice(b * batch, (b + 1) * batch);
        amp.opt->set_lr(optim::lr_at(lo, step));
        model->zero_grad();
        Tensor loss = ops::cross_entropy((*model)(x), y);  // f32 loss from 16-bit logits (the policy)
        CHECK(loss.dtype() == DType::F32);
        ops::scale(loss, static_cast<float>(scaler.scale())).backward();
        optim::amp_step(*amp.master, scaler, *amp.opt, amp.master->model_grads());
      }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double acc = accuracy(*model, test, low);
    std::printf("%s: trained %lld steps in %.2f s (%lld skipped, final scale %g); held-out accuracy %.3f\n",
                dtype_name(low), static_cast<long long>(step), secs, static_cast<long long>(scaler.skipped_steps()),
                scaler.scale(), acc);
    CHECK(acc >= 0.95);
    CHECK(accuracy(*model, train, low) >= 0.95);
    CHECK(scaler.skipped_steps() < 5);  // a scale of 2^16 fits this model: overflow is rare, if any
  }
}
