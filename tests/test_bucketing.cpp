// tests/test_bucketing.cpp: the bucket assignment is a pure function of sizes and bucket keys.
#include <doctest/doctest.h>

#include <set>

#include "dist/bucketing.h"

using namespace tandem;
using namespace tandem::dist;
using Buckets = std::vector<std::vector<size_t>>;

namespace {
const BucketKey kF32Cpu{DType::F32, Device::cpu()};
const BucketKey kF16Gpu{DType::F16, Device::cuda(0)};
// n parameters with the same key: one flat buffer could hold them all.
std::vector<BucketKey> same(size_t n) { return std::vector<BucketKey>(n, kF32Cpu); }
}  // namespace

TEST_CASE("buckets fill in reverse registration order, first bucket small") {
  // 6 parameters of 400 bytes; first bucket closes at >= 500 bytes, later ones at >= 1000.
  std::vector<size_t> bytes(6, 400);
  Buckets b = assign_buckets(bytes, same(6), {500, 1000});
  CHECK(b == Buckets{{5, 4}, {3, 2, 1}, {0}});
}

TEST_CASE("a parameter larger than the limit gets a bucket of its own") {
  Buckets b = assign_buckets({10, 5000, 10, 10}, same(4), {100, 100});
  CHECK(b == Buckets{{3, 2, 1}, {0}});  // 10+10+5000 passes the limit when the large one joins
  Buckets c = assign_buckets({10, 5000, 10, 10}, same(4), {15, 15});
  CHECK(c == Buckets{{3, 2}, {1}, {0}});
}

TEST_CASE("alone_bytes: a large parameter is a bucket alone, the open bucket closes before it") {
  // ZeRO-2's rule (reducer.cpp): without it the large gradient would share {3, 2, 1}.
  BucketingOptions o{100, 100};
  o.alone_bytes = 100;
  Buckets b = assign_buckets({10, 5000, 10, 10}, same(4), o);
  CHECK(b == Buckets{{3, 2}, {1}, {0}});
  // Two large ones in a row (VGG's classifier): each alone, small ones between them closed early.
  Buckets c = assign_buckets({10, 500, 10, 500, 10}, same(5), o);
  CHECK(c == Buckets{{4}, {3}, {2}, {1}, {0}});
}

TEST_CASE("limits of zero put every parameter alone: the bucketing-off baseline") {
  Buckets b = assign_buckets({4, 8, 12}, same(3), {0, 0});
  CHECK(b == Buckets{{2}, {1}, {0}});
}

TEST_CASE("different keys (dtype/device) never share a bucket; launch order follows readiness") {
  // Parameters alternate between two keys; with huge limits each key forms one bucket.
  const BucketKey a = kF32Cpu, g = kF16Gpu;
  Buckets b = assign_buckets({4, 4, 4, 4, 4}, {a, g, a, g, a}, {1 << 20, 1 << 20});
  CHECK(b == Buckets{{4, 2, 0}, {3, 1}});
  Buckets c = assign_buckets({4, 4, 4, 4}, {g, a, g, a}, {8, 8});
  CHECK(c == Buckets{{3, 1}, {2, 0}});
  // Same dtype on two devices, or two dtypes on one device: still different buckets.
  const BucketKey gpu1{DType::F16, Device::cuda(1)}, cpu16{DType::F16, Device::cpu()};
  CHECK(assign_buckets({4, 4}, {kF16Gpu, gpu1}, {1 << 20, 1 << 20}) == Buckets{{1}, {0}});
  CHECK(assign_buckets({4, 4}, {cpu16, kF32Cpu}, {1 << 20, 1 << 20}) == Buckets{{1}, {0}});
}

TEST_CASE("defaults are 1 MiB then 25 MiB; every parameter appears exactly once") {
  BucketingOptions o;
  CHECK(o.first_bucket_bytes == (1u << 20));
  CHECK(o.bucket_bytes == (25u << 20));
  std::vector<size_t> bytes;
  for (int i = 0; i < 100; ++i) bytes.push_back(size_t(1 + (i * 7919) % 997) << 12);  // up to ~4 MiB
  Buckets b = assign_buckets(bytes, same(bytes.size()), o);
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
  CHECK_THROWS(assign_buckets({1, 2}, same(1), {}));
}
