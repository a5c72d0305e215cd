// data/sampler.cpp: shuffle, then pad or cut and stride the positions left in the epoch.
#include "data/sampler.h"

#include <numeric>
#include <utility>

#include "core/check.h"
#include "core/ops/common/rng.h"

namespace tandem::data {

DistributedSampler::DistributedSampler(SamplerOptions opt) : opt_(opt) {
  TANDEM_CHECK(opt_.world_size >= 1 && opt_.rank >= 0 && opt_.rank < opt_.world_size, "sampler: rank ",
               opt_.rank, " is not in [0, world_size=", opt_.world_size, ")");
  TANDEM_CHECK(opt_.dataset_size > 0, "sampler: the dataset is empty");
  TANDEM_CHECK(num_samples(0) > 0, "sampler: ", opt_.dataset_size, " samples over ", opt_.world_size,
               " ranks, dropping the uneven tail, leave every rank empty; use fewer ranks or add data");
}

void DistributedSampler::check_start(int64_t start) const {
  TANDEM_CHECK(start >= 0 && start <= opt_.dataset_size, "sampler: start offset ", start,
               " is outside the epoch's [0, ", opt_.dataset_size,
               "] samples; pass the samples consumed in this epoch (a loader's samples_consumed()), "
               "never more than the dataset holds");
}

int64_t DistributedSampler::num_samples(int64_t start) const {
  check_start(start);
  const int64_t left = opt_.dataset_size - start, w = opt_.world_size;
  // PyTorch: drop_last -> floor(n / w) per rank; otherwise ceil(n / w) with wrap-around padding.
  return opt_.drop_last ? left / w : (left + w - 1) / w;
}

std::vector<int64_t> DistributedSampler::permutation(int64_t epoch) const {
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
  return order;
}

std::vector<int64_t> DistributedSampler::global_order(int64_t epoch, int64_t start) const {
  const std::vector<int64_t> perm = permutation(epoch);
  const int64_t total = total_size(start), n = opt_.dataset_size;
  std::vector<int64_t> order(static_cast<size_t>(total));
  // Position p >= n is padding: it wraps around (possibly several times when world_size > size).
  for (int64_t i = 0; i < total; ++i) order[static_cast<size_t>(i)] = perm[static_cast<size_t>((start + i) % n)];
  return order;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch, int64_t start) const {
  std::vector<int64_t> order = global_order(epoch, start);
  std::vector<int64_t> mine;
  mine.reserve(order.size() / static_cast<size_t>(opt_.world_size));
  for (size_t i = static_cast<size_t>(opt_.rank); i < order.size(); i += static_cast<size_t>(opt_.world_size))
    mine.push_back(order[i]);
  return mine;
}

}  // namespace tandem::data
