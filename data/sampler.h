// data/sampler.h: which dataset indices each rank reads in each epoch (PyTorch DistributedSampler),
// from any point of the epoch on.
//
// Every rank computes the same epoch order: a permutation of [0, size) shuffled from (seed, epoch)
// only (the identity when shuffle is off); neither the rank nor the world size enters it. Global
// position p of the epoch is permutation(epoch)[p % size]: positions >= size are the padding, which
// wraps around to the order's beginning. An epoch read from global position `start` (0 for a fresh
// epoch) reads positions start, start + 1, ... as follows:
//   - drop_last = false: its length is padded up to a multiple of world_size (so a few samples
//     appear twice per epoch: the epoch's first ones, as in PyTorch);
//   - drop_last = true: its tail is cut to the largest multiple of world_size.
// Rank r takes the r-th, (r + world_size)-th, ... of those positions (strided, as PyTorch does), so
// shards are disjoint apart from the padding and together cover the data.
//
// The prefix property, which makes resuming on another world size or batch size possible: after k
// batches of B samples on each of W ranks (the loader reads each rank's indices in order), the ranks
// together have read exactly the global positions [start, start + k*B*W) of the epoch. A run that
// stops there stores (epoch, start + k*B*W), capped at size, and a run resumed with any W' and B'
// from that offset reads exactly the samples not yet seen this epoch, in the same global order; the
// following epochs (start 0) do not depend on W or B beyond their own padding or cut. With the same
// W and an offset that is a multiple of W, the resumed ranks read exactly the indices the
// uninterrupted ones would have read, padding included.
// The permutation is a Fisher-Yates shuffle over a counter-based stream: it is identical on every
// rank and machine, but not the same permutation as torch.randperm.
#pragma once
#include <algorithm>
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
  // Samples per rank in an epoch read from global position `start` (in [0, dataset_size]) on; 0 when
  // nothing is left (start == dataset_size, or drop_last with fewer than world_size positions left).
  int64_t num_samples(int64_t start = 0) const;
  // num_samples(start) * world_size: the global positions such an epoch reads.
  int64_t total_size(int64_t start = 0) const { return num_samples(start) * opt_.world_size; }
  // The loaders' batches of `batch` rows per rank in such an epoch: a last partial batch is kept,
  // or dropped with `drop_last` (the loader's option, not the sampler's).
  int64_t num_batches(int64_t start, int64_t batch, bool drop_last) const {
    const int64_t n = num_samples(start);
    return drop_last ? n / batch : (n + batch - 1) / batch;
  }
  // The global position reached from `start` once every rank has read `rows` of its samples (at
  // most dataset_size: the wrapped-around padding counts as no further position).
  int64_t position_after(int64_t start, int64_t rows) const {
    return std::min(opt_.dataset_size, start + rows * opt_.world_size);
  }
  // This rank's dataset indices for `epoch` read from global position `start` on, in reading order.
  std::vector<int64_t> indices(int64_t epoch, int64_t start = 0) const;
  // The epoch's order: a permutation of [0, dataset_size), a function of (seed, epoch) only.
  std::vector<int64_t> permutation(int64_t epoch) const;
  // Global positions [start, start + total_size(start)) of the epoch (all ranks' indices
  // interleaved, padding or cut applied): what indices() shards.
  std::vector<int64_t> global_order(int64_t epoch, int64_t start = 0) const;
  const SamplerOptions& options() const { return opt_; }

 private:
  void check_start(int64_t start) const;
  SamplerOptions opt_;
};

}  // namespace tandem::data
