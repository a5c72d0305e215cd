// tests/test_checkpoint_format.cpp: "tandem-checkpoint-2"'s new fields (run id, progress in samples,
// class names, save time) round-trip through the file as plain strings PyTorch can read, and a
// "tandem-checkpoint-1" file still loads with those fields derived as checkpoint.h documents.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "checkpoint_test_util.h"
#include "core/safetensors.h"
#include "checkpoint/checkpoint.h"

using namespace tandem;

namespace {
// A format-1 file, as tandem 0.1 wrote it (its metadata keys, verbatim).
safetensors::Metadata format1(int64_t step, int64_t index_in_epoch, int64_t world_size) {
  return {{"format", "tandem-checkpoint-1"},
          {"tandem_version", "0.1"},
          {"model", "tiny"},
          {"step", std::to_string(step)},
          {"epoch", "2"},
          {"world_size", std::to_string(world_size)},
          {"data.sampler_epoch", "2"},
          {"data.index_in_epoch", std::to_string(index_in_epoch)},
          {"rng.default.seed", "7"},
          {"rng.default.offset", "99"}};
}
}  // namespace

TEST_CASE("format 2: run id, samples, epoch offset, global batch and class names round-trip") {
  ckpt_test::Scratch dir("fmt");
  const std::string p = dir.file("c.safetensors");
  TrainState s = ckpt_test::state(new_run_id(), 123, 4, 96);
  s.samples = 123 * 32 - 5;
  s.global_batch = 32;
  s.world_size = 4;
  s.index_in_epoch = 24;
  s.classes = {"n01440764", "a,b", "say \"hi\"", "back\\slash", "ünïcödé 猫", "", "[\"not\", \"json\"]"};
  s.saved_at = "1999-01-01T00:00:00.000000Z";  // ignored: save stamps its own time
  const std::string before = utc_timestamp();
  ckpt_test::write(p, s);

  const Checkpoint c = read_checkpoint(p);
  CHECK(c.state.run_id == s.run_id);
  CHECK(c.state.run_id.size() == 32);
  CHECK(c.state.samples == s.samples);
  CHECK(c.state.epoch_offset == 96);
  CHECK(c.state.global_batch == 32);
  CHECK(c.state.index_in_epoch == 24);
  CHECK(c.state.classes == s.classes);
  CHECK(c.state.saved_at >= before);
  CHECK(c.state.saved_at.size() == before.size());
  // The header alone gives the same state.
  const TrainState h = read_train_state(p);
  CHECK(h.run_id == c.state.run_id);
  CHECK(h.classes == c.state.classes);
  CHECK(h.saved_at == c.state.saved_at);

  // What PyTorch sees: a dict of strings; the class list is JSON that json.loads reads back.
  const safetensors::Metadata m = safetensors::load(p).metadata;
  CHECK(m.at("format") == "tandem-checkpoint-2");
  CHECK(m.at("data.samples") == std::to_string(s.samples));
  CHECK(nlohmann::json::parse(m.at("data.classes")).get<std::vector<std::string>>() == s.classes);
}

TEST_CASE("format 2: a per-rank position is written as the global offset; bad values are refused") {
  ckpt_test::Scratch dir("fmt2");
  TrainState s = ckpt_test::state("r", 10, 1);
  s.index_in_epoch = 16, s.world_size = 2;  // what the apps before the training-step library set
  ckpt_test::write(dir.file("a"), s);
  CHECK(read_train_state(dir.file("a")).epoch_offset == 32);
  CHECK(new_run_id() != new_run_id());

  s.classes = {"ok", std::string("\xff\xfe bad")};
  CHECK_THROWS_WITH_AS(ckpt_test::write(dir.file("b"), s), doctest::Contains("is not valid UTF-8"), Error);
  s.classes = {};
  s.run_id = "no spaces please";
  CHECK_THROWS_WITH_AS(ckpt_test::write(dir.file("b"), s), doctest::Contains("may hold only letters"), Error);
}

TEST_CASE("a format-1 file still loads, with the new fields derived") {
  ckpt_test::Scratch dir("fmt1");
  ckpt_test::Tiny m;
  const safetensors::NamedTensors t = {{"w", Tensor::from_vector({3, 4}, {2})},
                                       {"optimizer.w.momentum_buffer", Tensor::from_vector({1, 1}, {2})}};
  SUBCASE("train_imagenet's: no batch size recorded") {
    safetensors::save(dir.file("v1"), t, format1(40, 8, 4));
    const Checkpoint c = load_checkpoint(dir.file("v1"), m);
    CHECK(c.state.step == 40);
    CHECK(c.state.run_id.empty());
    CHECK(c.state.saved_at.empty());
    CHECK(c.state.index_in_epoch == 8);
    CHECK(c.state.epoch_offset == 32);  // 8 per rank x 4 ranks: the prefix of the epoch's order
    CHECK(c.state.global_batch == 0);   // unknown
    CHECK(c.state.samples == -1);       // unknown
    CHECK(c.state.classes.empty());
    CHECK(c.state.rng.at("default").offset == 99);
    CHECK(c.optimizer.size() == 1);
    CHECK(m.named_parameters()[0].second.to_vector() == std::vector<float>{3, 4});
  }
  SUBCASE("train_encoder's: batch_per_rank recorded") {
    safetensors::Metadata md = format1(40, 0, 4);
    md["extra.batch_per_rank"] = "16";
    safetensors::save(dir.file("v1e"), t, md);
    const TrainState s = read_train_state(dir.file("v1e"));
    CHECK(s.global_batch == 64);
    CHECK(s.samples == 40 * 64);
    CHECK(s.epoch_offset == 0);
  }
  SUBCASE("a damaged format-1 field is still an error") {
    safetensors::Metadata md = format1(40, 0, 4);
    md["step"] = "forty";
    safetensors::save(dir.file("bad"), t, md);
    CHECK_THROWS_WITH_AS(read_checkpoint(dir.file("bad")), doctest::Contains("is not an integer"), Error);
  }
  CHECK(is_checkpoint_format("tandem-checkpoint-1"));
  CHECK(is_checkpoint_format(kCheckpointFormat));
  CHECK_FALSE(is_checkpoint_format("tandem-checkpoint-3"));
}
