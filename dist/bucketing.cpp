// dist/bucketing.cpp: the bucket assignment (see bucketing.h for the rules and their reasons).
#include "dist/bucketing.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace tandem::dist {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<size_t>& bytes, const std::vector<BucketKey>& keys,
                                                const BucketingOptions& options) {
  TANDEM_CHECK(bytes.size() == keys.size(), "assign_buckets: ", bytes.size(), " sizes but ", keys.size(),
               " bucket keys");
  struct Open {
    std::vector<size_t> params;
    size_t bytes = 0;
    bool first = true;  // no bucket of this key was closed yet: the small limit applies
  };
  std::vector<std::pair<BucketKey, Open>> open;  // one bucket being filled per key (a model has few)
  std::vector<std::vector<size_t>> closed;       // in the order they filled up
  for (size_t k = bytes.size(); k-- > 0;) {      // reverse registration order
    auto it = std::find_if(open.begin(), open.end(), [&](const auto& o) { return o.first == keys[k]; });
    Open& b = it != open.end() ? it->second : open.emplace_back(keys[k], Open{}).second;
    if (options.alone_bytes > 0 && bytes[k] >= options.alone_bytes) {
      // Close the open bucket first: left open, it would sort before this one (launch order below)
      // and hold it back until later, smaller gradients fill it.
      if (!b.params.empty()) closed.push_back(std::move(b.params));
      closed.push_back({k});
      b = Open{{}, 0, false};
      continue;
    }
    b.params.push_back(k);
    b.bytes += bytes[k];
    const size_t limit = b.first ? options.first_bucket_bytes : options.bucket_bytes;
    if (b.bytes >= limit) {
      closed.push_back(std::move(b.params));
      b = Open{{}, 0, false};
    }
  }
  for (auto& [key, b] : open)
    if (!b.params.empty()) closed.push_back(std::move(b.params));
  // Launch order = the order in which buckets are expected to become ready: by their first
  // parameter in reverse registration order. With one key this is the order they filled up in;
  // with several it interleaves the keys' buckets, partly filled ones included.
  std::stable_sort(closed.begin(), closed.end(),
                   [](const std::vector<size_t>& a, const std::vector<size_t>& b) { return a.front() > b.front(); });
  return closed;
}

}  // namespace tandem::dist
