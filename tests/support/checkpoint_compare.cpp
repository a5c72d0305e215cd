// tests/support/checkpoint_compare.cpp: see checkpoint_compare.h.
#include "tests/support/checkpoint_compare.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include <nlohmann/json.hpp>

#include "core/safetensors.h"

namespace tandem::testing {

void check_identical_checkpoints(const std::string& a, const std::string& b, bool any_order) {
  auto x = safetensors::load(a);
  auto y = safetensors::load(b);
  if (any_order)
    for (auto* f : {&x, &y})
      std::sort(f->tensors.begin(), f->tensors.end(), [](const auto& l, const auto& r) { return l.first < r.first; });
  REQUIRE(x.tensors.size() == y.tensors.size());
  for (size_t i = 0; i < x.tensors.size(); ++i) {
    INFO(x.tensors[i].first);
    const auto &p = x.tensors[i].second, &q = y.tensors[i].second;
    REQUIRE(x.tensors[i].first == y.tensors[i].first);
    REQUIRE(p.nbytes() == q.nbytes());
    // An empty tensor has no storage (null data_ptr()), and memcmp on null is undefined even for 0 bytes.
    CHECK((p.nbytes() == 0 || std::memcmp(p.data_ptr(), q.data_ptr(), p.nbytes()) == 0));
  }
  // Everything but when and by which run the file was written: two runs compared here are two runs
  // (their own ids, their own clocks), and the rest of the metadata is their shared position.
  auto position = [](safetensors::Metadata m) {
    m.erase("saved_at");
    m.erase("run_id");
    return m;
  };
  CHECK(position(x.metadata) == position(y.metadata));
}

double check_close_checkpoints(const std::string& a, const std::string& b, double rel,
                               const std::vector<std::string>& skip) {
  const auto x = safetensors::load(a);
  const auto y = safetensors::load(b);
  REQUIRE(x.tensors.size() == y.tensors.size());
  double worst = 0;
  std::string worst_name;
  std::map<std::string, size_t> in_y;  // by name: a ZeRO run lists its optimizer state in another order
  for (size_t i = 0; i < y.tensors.size(); ++i) in_y[y.tensors[i].first] = i;
  for (size_t i = 0; i < x.tensors.size(); ++i) {
    const std::string& name = x.tensors[i].first;
    INFO(name);
    REQUIRE(in_y.count(name) == 1);
    const auto &p = x.tensors[i].second, &q = y.tensors[in_y.at(name)].second;
    REQUIRE(p.shape() == q.shape());
    REQUIRE(p.dtype() == q.dtype());
    if (!is_floating(p.dtype()) || p.numel() == 0) continue;
    if (std::any_of(skip.begin(), skip.end(), [&](const std::string& s) { return name.find(s) != std::string::npos; }))
      continue;
    const std::vector<float> u = p.to_vector(), v = q.to_vector();
    double diff = 0, mag = 1;
    for (size_t k = 0; k < u.size(); ++k) {
      diff = std::max(diff, std::abs(double(u[k]) - double(v[k])));
      mag = std::max(mag, std::abs(double(u[k])));
    }
    CHECK(std::isfinite(diff));
    CHECK(diff <= rel * mag);
    if (diff / mag > worst) worst = diff / mag, worst_name = name;
  }
  MESSAGE("largest relative difference ", worst, " (", worst_name, ")");
  return worst;
}

void check_resumed_run(const AppRun& resumed, const std::string& a, const std::string& b, const std::string& checkpoint) {
  INFO(resumed.output);
  REQUIRE(resumed.status == 0);
  check_identical_checkpoints(a + "/" + checkpoint, b + "/" + checkpoint);
  const auto model_state = [](const std::string& dir) -> double {
    return nlohmann::json::parse(slurp(dir + "/m.json"))["memory_ledger"]["measured_bytes"]["model_state"];
  };
  const double straight = model_state(a), after_resume = model_state(b);
  MESSAGE("model state measured: straight ", straight, " B, resumed ", after_resume, " B");
  CHECK(after_resume == doctest::Approx(straight).epsilon(0.02));
}

}  // namespace tandem::testing
