// tests/gpu_ledger.cpp: the memory ledger's prediction against the GPU's measured model state
// (issue 18.7; exits 77, Skipped, without a GPU).
//
// The first GPU run measured resnet18 f32 at 165.9 MiB against 133.8 predicted (+24 %) and resnet50
// AMP at +8.3 %: the cuBLASLt workspace (32 MiB) was counted as model state (apps/trainer/run/memory.h).
// Here train_imagenet runs 2 steps of each on the GPU, and the "memory_ledger" of its metrics JSON
// must have measured model state within 1 % of predicted. Why 1 %: after the fix the two differ by
// the step's last outputs (the loss, the counts: a few KiB) and by nothing that scales with the
// model; the old error was 8-24 %, so 1 % fails it with a wide margin and passes any honest
// accounting. Batch 32 at 64 px keeps the activations small; they are not part of either figure.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/app_runner.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json ledger_of(const std::string& model, const std::string& amp) {
  const fs::path dir = fs::temp_directory_path() / ("tandem_gpu_ledger_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path metrics = dir / (model + "_" + amp + ".json");
  const std::string cmd = tandem::testing::app("train_imagenet") + " --synthetic --device cuda --model " + model +
                          " --amp " + amp + " --steps 2 --batch 32 --image-size 64 --num-classes 1000" +
                          " --synthetic-size 64 --synthetic-val-size 0 --momentum 0.9 --metrics " + metrics.string();
  const tandem::testing::AppRun r = tandem::testing::run_app(cmd);
  REQUIRE_MESSAGE(r.status == 0, cmd, " failed:\n", r.output);
  return json::parse(tandem::testing::slurp(metrics))["memory_ledger"];
}

void check_within(const json& ledger, double bound) {
  const double predicted = ledger["predicted_bytes"]["model_state"].get<double>();
  const double measured = ledger["measured_bytes"]["model_state"].get<double>();
  MESSAGE("model state: predicted ", predicted / (1 << 20), " MiB, measured ", measured / (1 << 20), " MiB");
  REQUIRE(predicted > 0);
  CHECK(std::abs(measured - predicted) / predicted <= bound);
}

}  // namespace

TEST_CASE("resnet18 f32: the measured model state is the predicted one within 1 %") {
  check_within(ledger_of("resnet18", "off"), 0.01);
}

TEST_CASE("resnet50 AMP bf16: the measured model state is the predicted one within 1 %") {
  check_within(ledger_of("resnet50", "bf16"), 0.01);
}
