// apps/train/ddp_options.h: the trainers' DDP flags as dist::DdpOptions, shared by train_imagenet
// (apps/train/setup.cpp) and train_encoder (apps/encoder/setup.cpp), which spell them alike.
//
// --first-bucket-mb/--bucket-mb size the gradient buckets, --no-overlap waits for backward before
// any all-reduce, --compress bf16|fp16 casts the buckets on the wire, and --zero 2 turns each
// bucket's all-reduce into a reduce-scatter (each rank keeps its shard: dist/zero.h).
#pragma once
#include <string>

#include "dist/ddp.h"  // defines: DdpOptions

namespace tandem::apps {

struct DdpFlags {
  double first_bucket_mb = 1, bucket_mb = 25;
  bool overlap = true, bucketed = true;
  std::string compress = "none";  // none | bf16 | fp16
  int zero = 0;
};

dist::DdpOptions ddp_options(const DdpFlags& f);

}  // namespace tandem::apps
