// tests/test_resume.cpp: resume equals uninterrupted. K steps in one go and K/2 steps, a checkpoint
// file, a fresh process state (new model, optimizer, loader) restored from it, and K/2 more steps
// must leave bit-identical parameters, BN buffers and momentum buffers. The split falls mid-epoch,
// so the data position (sampler epoch + index within the epoch) is exercised, not only epoch ends.
// Uses the library pieces directly on the CPU (no DDP: one process), like apps/train_imagenet does.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "core/ops/loss/loss.h"
#include "core/random.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "checkpoint/checkpoint.h"
#include "layers/models/models.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"

using namespace tandem;

namespace {
constexpr int kClasses = 4;
constexpr int64_t kBatch = 8;
constexpr int64_t kSamples = 32;  // 4 steps per epoch: K = 10 steps crosses two epoch ends

// Everything one training process holds.
struct Trainer {
  ModulePtr model;
  std::unique_ptr<optim::SGD> opt;
  std::unique_ptr<data::Loader> loader;
  optim::LrScheduleOptions sched;
  TrainState st;

  explicit Trainer(bool init) {
    models::ModelOptions mo;
    mo.init = init;
    model = models::create_model("small_cnn", kClasses, /*seed=*/3, mo);
    optim::SGDOptions so;
    so.lr = 0.05, so.momentum = 0.9, so.weight_decay = 1e-3, so.nesterov = true;
    opt = std::make_unique<optim::SGD>(model->named_parameters(), so);
    data::SyntheticOptions syn;
    syn.size = kSamples, syn.num_classes = kClasses, syn.image_size = 16, syn.seed = 11;
    data::LoaderOptions lo;
    lo.batch_size = kBatch, lo.num_workers = 0, lo.seed = 5;
    loader = std::make_unique<data::Loader>(std::make_shared<data::SyntheticDataset>(syn), lo);
    sched.base_lr = 0.05, sched.warmup_steps = 2, sched.decay = optim::LrDecay::Cosine, sched.total_steps = 10;
    st.model = "small_cnn";
  }

  // The app's loop, for n steps from wherever `st` says.
  void train(int64_t n) {
    const int64_t spe = loader->batches_per_epoch();
    while (n > 0) {
      loader->start_epoch(st.epoch);
      data::Batch b;
      for (int64_t k = 0; k < st.index_in_epoch / kBatch; ++k) REQUIRE(loader->next(b));
      bool done = false;
      while (n > 0) {
        if (!loader->next(b)) { done = true; break; }
        opt->set_lr(optim::lr_at(sched, st.step));
        Tensor loss = ops::cross_entropy((*model)(b.images), b.labels, 0.1f);
        opt->zero_grad();
        loss.backward();
        opt->step();
        // A draw from the default generator per step stands in for dropout's randomness.
        Tensor noise = Tensor::empty({1});
        uniform_(noise, 0, 1);
        ++st.step, --n, st.index_in_epoch += kBatch;
      }
      if (done || st.index_in_epoch == spe * kBatch) st.epoch += 1, st.index_in_epoch = 0;
    }
    st.sampler_epoch = st.epoch;
    st.rng["default"] = {default_generator().seed(), default_generator().offset()};
  }

  NamedTensors everything() const {
    NamedTensors all = state_dict(*model);
    for (auto& [n, t] : opt->state()) all.emplace_back("optimizer." + n, t);
    return all;
  }
};

void check_identical(const NamedTensors& a, const NamedTensors& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    REQUIRE(a[i].first == b[i].first);
    REQUIRE(a[i].second.shape() == b[i].second.shape());
    CHECK(std::memcmp(a[i].second.data_ptr(), b[i].second.data_ptr(), a[i].second.nbytes()) == 0);
  }
}

bool any_differs(const NamedTensors& a, const NamedTensors& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (std::memcmp(a[i].second.data_ptr(), b[i].second.data_ptr(), a[i].second.nbytes()) != 0) return true;
  return a.size() != b.size();
}
}  // namespace

TEST_CASE("K steps equal K/2 steps + checkpoint + resume in a fresh trainer + K/2 steps, bit for bit") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tandem_resume_" + std::to_string(::getpid()))).string();

  manual_seed(1);
  Trainer straight(true);
  straight.train(10);

  manual_seed(1);
  Trainer first(true);
  first.train(5);
  CHECK(first.st.epoch == 1);
  CHECK(first.st.index_in_epoch == kBatch);  // mid-epoch: one batch into epoch 1
  save_checkpoint(path, *first.model, first.opt->state(), first.st);

  // A new "process": different seed and generator state, uninitialised model, fresh optimizer.
  manual_seed(999);
  Trainer resumed(false);
  Checkpoint ck = load_checkpoint(path, *resumed.model);
  resumed.opt->load_state(ck.optimizer);
  resumed.st = ck.state;
  default_generator().set_state(ck.state.rng.at("default").seed, ck.state.rng.at("default").offset);
  CHECK(resumed.st.step == 5);
  CHECK(resumed.st.model == "small_cnn");
  resumed.train(5);
  CHECK(resumed.st.step == 10);
  check_identical(straight.everything(), resumed.everything());
  CHECK(default_generator().offset() == straight.st.rng.at("default").offset);

  SUBCASE("the comparison is sensitive: resuming without the optimizer state diverges") {
    manual_seed(999);
    Trainer no_momentum(false);
    Checkpoint c2 = load_checkpoint(path, *no_momentum.model);
    no_momentum.st = c2.state;
    no_momentum.train(5);
    CHECK(any_differs(state_dict(*straight.model), state_dict(*no_momentum.model)));
  }
  std::filesystem::remove(path);
}

TEST_CASE("checkpoint metadata round-trips and a model-only file is refused as a checkpoint") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tandem_ckmeta_" + std::to_string(::getpid()))).string();
  ModulePtr m = models::create_model("small_cnn", kClasses, 1);
  TrainState s;
  s.step = 123, s.epoch = 4, s.sampler_epoch = 4, s.index_in_epoch = 64, s.world_size = 8, s.model = "small_cnn";
  s.rng["default"] = {42, 1ull << 40};
  s.rng["augment"] = {7, 9};
  s.extra["lr_schedule"] = "cosine";
  save_checkpoint(path, *m, {}, s);
  Checkpoint c = read_checkpoint(path);
  CHECK(c.state.step == 123);
  CHECK(c.state.epoch == 4);
  CHECK(c.state.index_in_epoch == 64);
  CHECK(c.state.world_size == 8);
  CHECK(c.state.tandem_version == kTandemVersion);
  CHECK(c.state.rng.at("default").offset == (1ull << 40));
  CHECK(c.state.rng.at("augment").seed == 7);
  CHECK(c.state.extra.at("lr_schedule") == "cosine");
  CHECK(c.optimizer.empty());

  save_model(path, *m);
  CHECK_THROWS_WITH_AS(read_checkpoint(path), doctest::Contains("is not a tandem training checkpoint"), Error);
  std::filesystem::remove(path);
}

TEST_CASE("conv momentum buffers are stored OIHW like their weights and come back OHWI") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tandem_ckconv_" + std::to_string(::getpid()))).string();
  ModulePtr m = models::create_model("small_cnn", kClasses, 1);
  auto convs = conv_weight_names(*m);
  REQUIRE(!convs.empty());
  Tensor w;
  for (auto& [n, t] : m->named_parameters())
    if (n == convs[0]) w = t;
  Tensor buf = randn(w.shape(), default_generator());
  save_checkpoint(path, *m, {{convs[0] + ".momentum_buffer", buf}}, TrainState{});
  Checkpoint raw = read_checkpoint(path);
  CHECK(raw.optimizer[0].second.shape() == Shape{w.size(0), w.size(3), w.size(1), w.size(2)});
  Checkpoint back = load_checkpoint(path, *m);
  CHECK(back.optimizer[0].second.shape() == w.shape());
  CHECK(back.optimizer[0].second.to_vector() == buf.to_vector());
  std::filesystem::remove(path);
}
