// data/sampler.h: which dataset indices each rank reads in each epoch (PyTorch DistributedSampler).
//
// Every rank computes the same global order: a permutation of [0, size) shuffled from (seed, epoch)
// (or the identity when shuffle is off). Then:
//   - drop_last = false: the order is padded by wrapping around to its own beginning until its
//     length is a multiple of world_size (so a few samples appear twice per epoch);
//   - drop_last = true: the tail is cut to the largest multiple of world_size.
// Rank r takes positions r, r + world_size, r + 2*world_size, ... (strided, as PyTorch does), so
// shards are disjoint apart from the padding and together cover the data.
// The permutation is a Fisher-Yates shuffle over a counter-based stream: it is identical on every
// rank and machine, but not the same permutation as torch.randperm.
#pragma once
#include <cstdint>
#include <vector>

namespace tandem::data {

struct SamplerOptions {
  int64_t dataset_size = 0;
  int rank = 0;
  int world_size = 1;
  bool shuffle = true;     // reshuffle every epoch (training); false keeps dataset order (evaluation)
  uint64_t seed = 0;       // must be the same on every rank
  bool drop_last = false;  // false: pad by wrapping around (PyTorch's default)
};

class DistributedSampler {
 public:
  explicit DistributedSampler(SamplerOptions opt);
  // Samples per rank per epoch.
  int64_t num_samples() const { return num_samples_; }
  // num_samples() * world_size.
  int64_t total_size() const { return num_samples_ * opt_.world_size; }
  // This rank's dataset indices for `epoch`, in reading order.
  std::vector<int64_t> indices(int64_t epoch) const;
  // The global order before sharding (all ranks' indices interleaved); exposed for tests.
  std::vector<int64_t> global_order(int64_t epoch) const;
  const SamplerOptions& options() const { return opt_; }

 private:
  SamplerOptions opt_;
  int64_t num_samples_ = 0;
};

}  // namespace tandem::data
