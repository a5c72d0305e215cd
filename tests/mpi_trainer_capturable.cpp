// tests/mpi_trainer_capturable.cpp: the Step's capturable update (apps/trainer/step/step.h, "The
// capturable update") run eagerly on the CPU under mpiexec -n 2 and -n 4, against the host form.
//
// A CUDA graph cannot run here, but everything it would capture can: StepOptions::capturable
// builds the tensor-mode loss scaler, the GradClipper, the optimizers' step(found_inf) and the
// found-inf all-reduce over the Step's communicator, and runs them eagerly. The host form is the
// oracle, and the two must agree bit for bit (the same arithmetic in the same order; the scale is
// a power of two, so multiplying by it - and by 1/2 for two micro-batches - is exact):
//  - DDP x f32, bf16, fp16 x SGD (momentum), AdamW, LAMB x clipping (0.5, small enough to clip):
//    every StepResult (applied, grad_norm - the f32 the device holds), the parameters after every step, the checkpoint state
//    (optimizer, f32 masters, loss scaler), the loss scale; ranks stay bit-identical.
//  - Overflow steps: under AMP one rank's loss is multiplied by inf at steps 2 and 4 (after the
//    DDP average every rank holds inf/NaN gradients), and fp16 starts at GradScaler's 2^16, so its
//    early steps may overflow by themselves: both forms skip the same steps, back the scale off
//    alike, and the skipped steps change nothing.
//  - Two micro-batches per step (accumulation) under fp16: still bit for bit.
//  - A checkpoint written by the host form resumes in the capturable form (and the other way),
//    continuing exactly as the uninterrupted host run: the scaler's entries mean the same in both.
//  - Without a graph nothing goes unreported: skipped_unreported() is 0.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apps/trainer/step/step.h"
#include "core/ops/ops.h"
#include "dist/transport/bootstrap.h"
#include "checkpoint/checkpoint.h"
#include "layers/layers.h"
#include "tests/support/ddp_fixture.h"

using namespace tandem;
using namespace tandem::testing::ddp_fixture;
using namespace tandem::trainer;

namespace {

constexpr double kStepLr = 0.01;
constexpr int kRunSteps = 6;

struct Config {
  Precision precision = Precision::F32;
  std::string optimizer = "adamw";
  double clip = 0;
  int accum = 1;
};

std::string name_of(const Config& c) {
  return std::string(trainer::precision_name(c.precision)) + " " + c.optimizer + " clip " + std::to_string(c.clip) +
         " accum " + std::to_string(c.accum);
}

StepOptions step_options(const Config& c, bool capturable) {
  StepOptions o;
  o.precision = c.precision;
  o.optimizer = c.optimizer;
  o.optimizer_options.lr = kStepLr;
  o.optimizer_options.weight_decay = 0.01;
  if (c.optimizer == "sgd") o.optimizer_options.momentum = 0.9;
  o.clip_grad_norm = c.clip;
  o.grad_accum_steps = c.accum;
  o.first_bucket_mb = 256.0 / (1 << 20), o.bucket_mb = 1024.0 / (1 << 20);  // several buckets
  o.on_nonfinite = trainer::OnNonfinite::Off;  // as under a graph; the overflow steps reach the update
  o.capturable = capturable;
  return o;
}

struct Run {
  std::shared_ptr<LayersNet> model = std::make_shared<LayersNet>(7 + 100 * dist::world().rank);
  std::unique_ptr<Step> step;
  Run(const StepOptions& o, const Step::Restore& restore = {}) {
    step = std::make_unique<Step>(model, StepComms(dist::comm_for(Device::cpu())), o, restore);
  }
  // One step over this rank's rows; `poison`: this rank's loss times inf (an overflow step).
  StepResult run(const Tensor& x, const Tensor& y, int accum, bool poison) {
    step->set_lr(kStepLr);
    const int64_t rows = x.size(0) / accum;
    return step->run([&](int m) {
      Tensor loss = ops::cross_entropy(step->forward(x.slice(m * rows, (m + 1) * rows)),
                                       y.slice(m * rows, (m + 1) * rows));
      return poison ? ops::scale(loss, INFINITY) : loss;
    });
  }
};

}  // namespace

TEST_CASE("the capturable update equals the host update bit for bit: f32, bf16, fp16 x SGD, AdamW, LAMB x clipping, with overflow steps") {
  const dist::World& w = dist::world();
  const Data d = make_data(2 * w.size * kBatch);
  const Tensor x = d.x.slice(2 * w.rank * kBatch, (2 * w.rank + 2) * kBatch);
  const Tensor y = d.y.slice(2 * w.rank * kBatch, (2 * w.rank + 2) * kBatch);
  std::vector<Config> configs;
  for (Precision p : {Precision::F32, Precision::BF16, Precision::F16})
    for (const char* opt : {"sgd", "adamw", "lamb"})
      for (double clip : {0.0, 0.5}) configs.push_back({p, opt, clip, 1});
  configs.push_back({Precision::F16, "adamw", 0.5, 2});  // accumulation: the loss / 2 after the scale
  for (const Config& c : configs) {
    CAPTURE(name_of(c));
    const bool amp = c.precision != Precision::F32;
    Run host(step_options(c, false)), dev(step_options(c, true));
    CHECK_FALSE(host.step->capturable());
    CHECK(dev.step->capturable());
    int applied = 0, skipped = 0, clipped = 0;
    for (int k = 0; k < kRunSteps; ++k) {
      // Under AMP the last rank's loss overflows at steps 2 and 4; f32 has no skip to compare.
      const bool poison = amp && (k == 2 || k == 4) && w.rank == w.size - 1;
      const StepResult rh = host.run(x, y, c.accum, poison), rd = dev.run(x, y, c.accum, poison);
      CHECK(rd.applied == rh.applied);
      CHECK(rd.skipped == rh.skipped);
      // -1 on both when nothing was clipped; else the same norm, which the GradClipper keeps as an
      // f32 and the host form returns as the f64 it rounds from.
      CHECK(rd.grad_norm == static_cast<double>(static_cast<float>(rh.grad_norm)));
      CHECK(host_bytes(rd.loss) == host_bytes(rh.loss));
      CHECK(same_bits(*dev.model, *host.model));
      applied += rh.applied, skipped += !rh.applied, clipped += rh.grad_norm >= 0;
      if (amp && (k == 2 || k == 4)) CHECK_FALSE(rh.applied);  // every rank skips the poisoned step
    }
    CHECK(applied >= (c.precision == Precision::F16 ? 1 : amp ? kRunSteps - 2 : kRunSteps));
    if (amp) CHECK(skipped >= 2);
    if (c.clip > 0) CHECK(clipped == applied);
    CHECK(dev.step->loss_scale() == host.step->loss_scale());
    CHECK(dev.step->skipped_unreported() == 0);  // no graph: every skip was in a StepResult
    CHECK(bit_identical(dist::comm_for(Device::cpu()), *dev.model));
    const optim::NamedTensors hs = host.step->state(), ds = dev.step->state();
    if (w.rank == 0) {
      CHECK(same_state(ds, hs));
      if (amp) {  // the scaler's entries, with the same values, are part of it
        int scaler_entries = 0;
        for (const auto& [name, t] : ds) scaler_entries += name.rfind("amp.scaler.", 0) == 0;
        CHECK(scaler_entries == 3);
      }
    }
  }
}

TEST_CASE("a host-form checkpoint resumes in the capturable form and the other way, as the uninterrupted run") {
  const dist::World& w = dist::world();
  const Data d = make_data(w.size * kBatch);
  const Tensor x = rank_rows(d.x, w.rank), y = rank_rows(d.y, w.rank);
  const Config c{Precision::F16, "adamw", 0.5, 1};
  for (bool first_capturable : {false, true}) {
    CAPTURE(first_capturable);
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("tandem_mpi_trainer_capturable_np" + std::to_string(w.size) + "_" +
                               std::to_string(first_capturable) + ".safetensors")).string();
    Run whole(step_options(c, false));
    for (int k = 0; k < 6; ++k) whole.run(x, y, 1, k == 1 && w.rank == 0);
    Run first(step_options(c, first_capturable));
    for (int k = 0; k < 3; ++k) first.run(x, y, 1, k == 1 && w.rank == 0);
    save_on_rank0(dist::comm_for(Device::cpu()), path, *first.model, first.step->state());
    Run second(step_options(c, !first_capturable), [&](Module& m) { return load_checkpoint(path, m).optimizer; });
    CHECK(second.step->loss_scale() == first.step->loss_scale());
    for (int k = 3; k < 6; ++k) second.run(x, y, 1, false);
    CHECK(same_bits(*second.model, *whole.model));
    const optim::NamedTensors end = second.step->state(), whole_end = whole.step->state();
    if (w.rank == 0) CHECK(same_state(end, whole_end));
  }
}
