// dist/bucketing.h: which gradients share a bucket - a pure function, testable without a GPU.
//
// Parameters are visited in reverse registration order, because backward produces gradients
// roughly in that order (the last layer's first), so a bucket fills up with gradients that become
// ready close together. A bucket is closed as soon as it holds at least its byte limit. The first
// bucket's limit is small (1 MiB): its all-reduce can start early in backward instead of waiting
// for 25 MiB of gradients; the rest use a larger limit (25 MiB, PyTorch DDP's default) because
// one large message uses the link far better than many small ones (see apps/bench_allreduce).
// A bucket holds a single dtype and device (one flat buffer, one collective), so parameters with
// different BucketKeys never share a bucket. A parameter larger than the limit closes the bucket it
// joins; with `alone_bytes` set, a parameter that large gets a bucket of its own instead (ZeRO-2:
// its gradient can then be the bucket itself, see bucket_collective.h).
#pragma once
#include <cstddef>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace tandem::dist {

struct BucketingOptions {
  size_t first_bucket_bytes = size_t{1} << 20;  // 1 MiB: the first bucket launches early in backward
  size_t bucket_bytes = size_t{25} << 20;       // 25 MiB: large enough to reach link bandwidth
  size_t alone_bytes = 0;  // > 0: a parameter of at least this many bytes is a bucket alone; 0: off (DDP)
};

// What parameters are grouped by: one bucket is one flat buffer, so one dtype on one device; and
// under ZeRO-3 one run of a module unit's parameters (zero3.h), so units are gathered as whole buckets.
struct BucketKey {
  DType dtype = DType::F32;
  Device device;
  size_t unit = 0;
  bool operator==(const BucketKey&) const = default;
};

// bytes[i] and keys[i] describe parameter i, in registration order. Returns the buckets in launch
// order, each a list of parameter indices in the order their gradients sit in the bucket (which is
// the reverse registration order). Every parameter appears in exactly one bucket.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<size_t>& bytes, const std::vector<BucketKey>& keys,
                                                const BucketingOptions& options = {});

}  // namespace tandem::dist
