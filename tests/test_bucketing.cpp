// tests/test_bucketing.cpp: the bucket assignment is a pure function of sizes and groups.
#include <doctest/doctest.h>

#include <set>

#include "dist/bucketing.h"

using namespace tandem::dist;
using Buckets = std::vector<std::vector<size_t>>;

TEST_CASE("buckets fill in reverse registration order, first bucket small") {
  // 6 parameters of 400 bytes; first bucket closes at >= 500 bytes, later ones at >= 1000.
  std::vector<size_t> bytes(6, 400);
  Buckets b = assign_buckets(bytes, std::vector<int>(6, 0), {500, 1000});
  CHECK(b == Buckets{{5, 4}, {3, 2, 1}, {0}});
}

TEST_CASE("a parameter larger than the limit gets a bucket of its own") {
  Buckets b = assign_buckets({10, 5000, 10, 10}, std::vector<int>(4, 0), {100, 100});
  CHECK(b == Buckets{{3, 2, 1}, {0}});  // 10+10+5000 passes the limit when the large one joins
  Buckets c = assign_buckets({10, 5000, 10, 10}, std::vector<int>(4, 0), {15, 15});
  CHECK(c == Buckets{{3, 2}, {1}, {0}});
}

TEST_CASE("limits of zero put every parameter alone: the bucketing-off baseline") {
  Buckets b = assign_buckets({4, 8, 12}, {0, 0, 0}, {0, 0});
  CHECK(b == Buckets{{2}, {1}, {0}});
}

TEST_CASE("different groups (dtype/device) never share a bucket; launch order follows readiness") {
  // Parameters alternate between two groups; with huge limits each group forms one bucket.
  Buckets b = assign_buckets({4, 4, 4, 4, 4}, {0, 1, 0, 1, 0}, {1 << 20, 1 << 20});
  CHECK(b == Buckets{{4, 2, 0}, {3, 1}});
  Buckets c = assign_buckets({4, 4, 4, 4}, {1, 0, 1, 0}, {8, 8});
  CHECK(c == Buckets{{3, 1}, {2, 0}});
}

TEST_CASE("defaults are 1 MiB then 25 MiB; every parameter appears exactly once") {
  BucketingOptions o;
  CHECK(o.first_bucket_bytes == (1u << 20));
  CHECK(o.bucket_bytes == (25u << 20));
  std::vector<size_t> bytes;
  for (int i = 0; i < 100; ++i) bytes.push_back(size_t(1 + (i * 7919) % 997) << 12);  // up to ~4 MiB
  Buckets b = assign_buckets(bytes, std::vector<int>(bytes.size(), 0), o);
  std::set<size_t> seen;
  size_t prev_front = bytes.size();
  for (size_t k = 0; k < b.size(); ++k) {
    size_t sum = 0;
    for (size_t p : b[k]) {
      CHECK(seen.insert(p).second);
      sum += bytes[p];
    }
    CHECK(b[k].front() < prev_front);  // launch order is reverse registration order
    prev_front = b[k].front();
    if (k + 1 < b.size()) CHECK(sum >= (k == 0 ? o.first_bucket_bytes : o.bucket_bytes));  // closed when full
    if (k == 0) CHECK(sum - bytes[b[k].back()] < o.first_bucket_bytes);  // and not one parameter later
  }
  CHECK(seen.size() == bytes.size());
}

TEST_CASE("mismatched inputs are refused") {
  CHECK_THROWS(assign_buckets({1, 2}, {0}, {}));
}
