// tests/test_apps_smoke.cpp: the benchmark programs run and report consistent numbers.
// Not a timing test: it runs bench_ops (CPU part, 1 rep) and bench_allreduce (2 ranks, sizes up to
// 64 KiB) and checks the invariants of what they print - every time positive, ratio = tandem time /
// direct time, algbw = bytes / time, busbw = algbw * 2 (n - 1) / n (nccl-tests' definition) - so a
// benchmark that rots or miscomputes its columns fails CI instead of a GPU session.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/support/app_runner.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using tandem::testing::app;

namespace {
json run_json(const std::string& cmd, const fs::path& out) {
  const tandem::testing::AppRun r = tandem::testing::run_app(cmd + " --json " + out.string());
  REQUIRE_MESSAGE(r.status == 0, cmd, " failed:\n", r.output);
  return json::parse(tandem::testing::slurp(out));
}
const fs::path kDir = fs::temp_directory_path() / ("tandem_smoke_" + std::to_string(::getpid()));
}  // namespace

TEST_CASE("bench_ops (CPU part): every row has positive times and ratio = tandem / direct") {
  fs::create_directories(kDir);
  json j = run_json(app("bench_ops") + " --cpu --cpu-reps 1", kDir / "ops.json");
  REQUIRE(j["rows"].size() >= 3);
  for (const json& r : j["rows"]) {
    INFO(r.dump());
    CHECK(r["tandem_ms"].get<double>() > 0);
    CHECK(r["direct_ms"].get<double>() > 0);
    CHECK(r["ratio"].get<double>() ==
          doctest::Approx(r["tandem_ms"].get<double>() / r["direct_ms"].get<double>()).epsilon(1e-6));
  }
}

TEST_CASE("bench_allreduce (2 ranks, MPI): algbw = bytes / time and busbw = algbw * 2(n-1)/n") {
  fs::create_directories(kDir);
  json rows = run_json("HYDRA_LAUNCHER=fork mpiexec -n 2 " + app("bench_allreduce") +
                           " --backend mpi --max-bytes 64K --warmup 1 --reps 3",
                       kDir / "ar.json");
  REQUIRE(rows.size() == 14);  // 8 B .. 64 KiB in powers of two
  for (const json& r : rows) {
    INFO(r.dump());
    double t = r["time_us"].get<double>(), bytes = r["bytes"].get<double>(), n = r["ranks"].get<double>();
    CHECK(t > 0);
    CHECK(n == 2);
    CHECK(r["algbw_GBps"].get<double>() == doctest::Approx(bytes / (t * 1e-6) / 1e9).epsilon(1e-6));
    CHECK(r["busbw_GBps"].get<double>() == doctest::Approx(r["algbw_GBps"].get<double>() * 2 * (n - 1) / n).epsilon(1e-9));
  }
  fs::remove_all(kDir);
}
