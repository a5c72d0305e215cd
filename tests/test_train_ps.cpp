// tests/test_train_ps.cpp: `train_imagenet --strategy ps` end to end, under `mpiexec -n 2` on the CPU.
//
// The parameter server (dist/extras/parameter_server.h) must train to the same loss as DDP on the same
// synthetic data (same SGD with momentum, same batches; the sums differ only in order, so the losses
// agree to ~1e-5), write its push/pull "buckets" and strategy in the metrics JSON, and refuse more
// servers than ranks with a sentence naming the limit. Runs the binaries through tests/support/app_runner.h.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/app_runner.h"

using namespace tandem::testing;

namespace {

// 24 synthetic samples, batch 4 on 2 ranks: 3 steps per epoch; 6 steps = 2 epochs.
AppRun train(const std::string& args) {
  return run_app("HYDRA_LAUNCHER=fork timeout -s KILL 120 " + mpiexec(2) + app("train_imagenet") +
                 " --device cpu --model small_cnn --synthetic --synthetic-size 24 --synthetic-val-size 8"
                 " --num-classes 4 --image-size 16 --batch 4 --workers 1 --lr 0.05 --steps 6 --log-every 3 " + args);
}

nlohmann::json metrics_of(const std::string& args, const std::filesystem::path& file) {
  AppRun r = train(args + " --metrics " + file.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("--strategy ps trains like ddp and reports its pushes and pulls") {
  namespace fs = std::filesystem;
  using json = nlohmann::json;
  const fs::path dir = scratch_dir("tandem_ps");
  const json ddp = metrics_of("--strategy ddp", dir / "ddp.json");
  CHECK(ddp["strategy"] == "ddp");
  CHECK(ddp["num_classes"] == 4);
  CHECK(!ddp["buckets"].empty());
  for (int servers : {1, 2}) {
    CAPTURE(servers);
    const json ps = metrics_of("--strategy ps --ps-servers " + std::to_string(servers),
                               dir / ("ps" + std::to_string(servers) + ".json"));
    CHECK(ps["strategy"] == "ps");
    CHECK(ps["ps_servers"] == servers);
    // One push and one pull per server and step, each a "bucket" ready when backward ended.
    REQUIRE(ps["buckets"].size() == static_cast<size_t>(2 * servers));
    for (const json& b : ps["buckets"]) {
      CHECK(b["bytes"].get<double>() > 0);
      CHECK(b["launch_ms"].get<double>() >= b["ready_ms"].get<double>() - 1e-3);
      CHECK(b["finish_ms"].get<double>() >= b["launch_ms"].get<double>());
    }
    CHECK(ps["comm"]["overlap"].get<double>() < 0.5);  // pushed after backward: nothing to hide behind
    const double a = ps["final"]["train_loss"].get<double>(), b = ddp["final"]["train_loss"].get<double>();
    CHECK(std::isfinite(a));
    CHECK(std::abs(a - b) <= 1e-4 * std::max(1.0, std::abs(b)));
  }
  fs::remove_all(dir);
}

TEST_CASE("--ps-servers above the number of ranks fails with a sentence naming the limit") {
  AppRun r = train("--strategy ps --ps-servers 3");
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.has("must be between 1 and the number of ranks"));
}
