// dist/shard_layout.cpp: chunk sizes and the pieces a rank owns (see shard_layout.h).
#include "dist/shard_layout.h"

#include <algorithm>

#include "core/check.h"

namespace tandem::dist {

int64_t shard_chunk(int64_t numel, int world) {
  TANDEM_CHECK(world >= 1 && numel >= 0, "shard_chunk: need world >= 1 and numel >= 0");
  const int64_t per_rank = (numel + world - 1) / world;
  return std::max<int64_t>(kShardAlign, (per_rank + kShardAlign - 1) / kShardAlign * kShardAlign);
}

ShardLayout::ShardLayout(std::vector<LayoutBucket> buckets, int world) : buckets_(std::move(buckets)), world_(world) {
  for (LayoutBucket& b : buckets_) {
    TANDEM_CHECK(b.params.size() == b.offsets.size() && b.params.size() == b.lengths.size(),
                 "ShardLayout: a bucket's params, offsets and lengths must have the same length");
    b.numel = b.params.empty() ? 0 : b.offsets.back() + b.lengths.back();
    b.chunk = shard_chunk(b.numel, world);
  }
}

std::vector<ShardPiece> ShardLayout::pieces(int rank) const {
  TANDEM_CHECK(rank >= 0 && rank < world_, "ShardLayout: rank ", rank, " is not in a world of ", world_);
  std::vector<ShardPiece> out;
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    const LayoutBucket& b = buckets_[bi];
    const int64_t lo = rank * b.chunk, hi = lo + b.chunk;  // the rank's slice, in bucket elements
    for (size_t j = 0; j < b.params.size(); ++j) {
      const int64_t s = std::max(lo, b.offsets[j]), e = std::min(hi, b.offsets[j] + b.lengths[j]);
      if (s < e) out.push_back({bi, b.params[j], s - b.offsets[j], s - lo, e - s});
    }
  }
  return out;
}

int64_t ShardLayout::shard_numel() const {
  int64_t n = 0;
  for (const LayoutBucket& b : buckets_) n += b.chunk;
  return n;
}

}  // namespace tandem::dist
