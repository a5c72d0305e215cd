// dist/shard_layout.h: the canonical ZeRO layout - which rank owns which elements of which parameter.
//
// The flat parameter space is the gradient buckets laid end to end (dist/bucketing.h decides the
// buckets; inside a bucket, parameters sit back to back in bucket order). Each bucket is padded at
// its end so that it splits into N equal chunks, each a multiple of kShardAlign elements:
//
//     chunk(b) = round_up(ceil(numel(b) / N), kShardAlign),   padded(b) = N * chunk(b)
//     rank r owns elements [r * chunk(b), (r + 1) * chunk(b)) of every bucket b
//
// Why per bucket and not one cut of the whole space: a reduce-scatter of bucket b (ZeRO-2, during
// backward) then hands rank r exactly its slice of bucket b, and the all-gather of bucket b's
// parameters (after the step) puts every rank's slice back in place - each collective is one bucket,
// in the same order on every rank, as the reducer's all-reduces are. A rank's shard is the union of
// its slices of every bucket: 1/N of every bucket, so 1/N of the whole, to within the padding.
// Why "canonical": the layout is a pure function of the bucket assignment and N, and every element
// of a slice is named by (parameter, offset in the flattened parameter). Checkpoints never store
// slices: they store unsharded tensors by parameter name (dist/zero.h gathers them), so any world
// size and any stage can resume them and recompute its own layout.
// The padding is never read: it holds zeros in the gradient buffers and is skipped by the pieces.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem::dist {

// 16 elements = 64 bytes of f32 (32 of 16-bit): a chunk starts on a cache line / the 16-byte
// alignment NCCL and vectorised kernels like, whatever the bucket sizes are.
constexpr int64_t kShardAlign = 16;

// Elements of one rank's slice of a bucket of `numel` elements over `world` ranks.
int64_t shard_chunk(int64_t numel, int world);

// One bucket as the layout sees it: its parameters' offsets and lengths inside the bucket.
struct LayoutBucket {
  std::vector<size_t> params;    // parameter indices (the reducer's list), in bucket order
  std::vector<int64_t> offsets;  // element offset of each parameter in the bucket
  std::vector<int64_t> lengths;  // element count of each parameter
  int64_t numel = 0;             // unpadded: offsets.back() + lengths.back()
  int64_t chunk = 0;             // shard_chunk(numel, world)
};

// A run of elements that one rank owns: part of one parameter, at a place in the rank's slice.
struct ShardPiece {
  size_t bucket = 0;         // which bucket
  size_t param = 0;          // parameter index (the reducer's list)
  int64_t param_offset = 0;  // first element, in the flattened parameter
  int64_t slice_offset = 0;  // first element, in the rank's slice of the bucket (0 .. chunk)
  int64_t length = 0;
};

class ShardLayout {
 public:
  ShardLayout(std::vector<LayoutBucket> buckets, int world);
  int world() const { return world_; }
  const std::vector<LayoutBucket>& buckets() const { return buckets_; }
  // The pieces rank `rank` owns, bucket by bucket, in bucket order. Together the pieces of all
  // ranks cover every parameter element exactly once.
  std::vector<ShardPiece> pieces(int rank) const;
  // Elements in one rank's shard (padding included): sum of the chunks.
  int64_t shard_numel() const;

 private:
  std::vector<LayoutBucket> buckets_;
  int world_;
};

}  // namespace tandem::dist
