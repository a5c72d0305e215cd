// tests/support/checkpoint_compare.cpp: see checkpoint_compare.h.
#include "tests/support/checkpoint_compare.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

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

}  // namespace tandem::testing
