// data/sampler.cpp: shuffle, pad or cut, stride.
#include "data/sampler.h"

#include <numeric>
#include <utility>

#include "core/check.h"
#include "core/ops/rng.h"

namespace tandem::data {

DistributedSampler::DistributedSampler(SamplerOptions opt) : opt_(opt) {
  TANDEM_CHECK(opt_.world_size >= 1 && opt_.rank >= 0 && opt_.rank < opt_.world_size, "sampler: rank ",
               opt_.rank, " is not in [0, world_size=", opt_.world_size, ")");
  TANDEM_CHECK(opt_.dataset_size > 0, "sampler: the dataset is empty");
  const int64_t n = opt_.dataset_size, w = opt_.world_size;
  // PyTorch: drop_last -> floor(n / w) per rank; otherwise ceil(n / w) with wrap-around padding.
  num_samples_ = opt_.drop_last ? n / w : (n + w - 1) / w;
  TANDEM_CHECK(num_samples_ > 0, "sampler: drop_last with ", n, " samples over ", w,
               " ranks leaves every rank empty; use fewer ranks or drop_last = false");
}

std::vector<int64_t> DistributedSampler::global_order(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(opt_.dataset_size));
  std::iota(order.begin(), order.end(), 0);
  if (opt_.shuffle) {
    // Fisher-Yates from the back; draw k is keyed by (seed, epoch) and k only.
    uint64_t key = rng::mix64(rng::mix64(opt_.seed ^ 0x73616d706c6572ULL) + static_cast<uint64_t>(epoch));
    for (int64_t i = opt_.dataset_size - 1; i > 0; --i) {
      auto j = static_cast<int64_t>(rng::uniform_f64(key, static_cast<uint64_t>(i)) * static_cast<double>(i + 1));
      if (j > i) j = i;
      std::swap(order[i], order[j]);
    }
  }
  const auto total = static_cast<size_t>(total_size());
  if (order.size() > total) {
    order.resize(total);
  } else {
    // Wrap around (possibly several times when world_size > dataset_size). The value is copied
    // before push_back because push_back may reallocate under a reference into the vector.
    order.reserve(total);
    for (size_t i = 0; order.size() < total; ++i) {
      int64_t v = order[i];
      order.push_back(v);
    }
  }
  return order;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order = global_order(epoch);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t i = static_cast<size_t>(opt_.rank); i < order.size(); i += static_cast<size_t>(opt_.world_size))
    mine.push_back(order[i]);
  return mine;
}

}  // namespace tandem::data
