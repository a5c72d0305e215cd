// tests/checkpoint_test_util.h: a scratch folder and tiny real checkpoints for test_checkpoint*.cpp
// (the folder code reads each file's metadata, so the files must be real checkpoints).
#pragma once
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "checkpoint/checkpoint.h"
#include "layers/module.h"

namespace ckpt_test {

// A fresh folder under the system temp dir, removed with everything in it at scope exit.
struct Scratch {
  std::filesystem::path path;
  explicit Scratch(const std::string& tag) {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           ("tandem_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// One parameter: a checkpoint of it is a few hundred bytes.
struct Tiny : tandem::Module {
  Tiny() { register_parameter("w", tandem::Tensor::ones({2})); }
  tandem::Tensor forward(const tandem::Tensor& x) override { return x; }
  std::string type_name() const override { return "Tiny"; }
};

// A state at an epoch end (offset 0) or inside one.
inline tandem::TrainState state(const std::string& run_id, int64_t step, int64_t epoch, int64_t epoch_offset = 0) {
  tandem::TrainState s;
  s.run_id = run_id;
  s.step = step;
  s.epoch = s.sampler_epoch = epoch;
  s.epoch_offset = epoch_offset;
  s.samples = step * 8;
  s.global_batch = 8;
  s.model = "tiny";
  return s;
}

inline void write(const std::string& path, const tandem::TrainState& s) {
  Tiny m;
  tandem::save_checkpoint(path, m, {}, s);
}

}  // namespace ckpt_test
