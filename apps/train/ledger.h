// apps/train/ledger.h: the memory ledger's inputs and JSON, shared by train_imagenet
// (apps/train/memory.h) and train_encoder (apps/encoder/setup.h).
//
// What both trainers know the same way: the trainable parameter count and the largest gradient
// bucket (from DDP's reducer), this rank's ZeRO shard, and the bytes the model state already holds
// at set-up (parameters, gradient buckets and shards, AMP's f32 masters), which the measurement
// subtracts from the allocator's total to leave what is not model state (data, loaders). What
// differs (the optimizer's state bytes, --amp) the caller fills in before dist::predict_memory.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

#include "dist/ddp.h"            // defines: DistributedDataParallel
#include "dist/measure/memory_ledger.h"  // defines: LedgerOptions, MemoryLedger
#include "dist/zero.h"           // defines: Zero

namespace tandem::apps {

// params, largest_param, cpu_widen, largest_bucket, next_bucket, shard_params (zero null: -1), world and stage (zero's, or 0).
dist::LedgerOptions ledger_inputs(dist::DistributedDataParallel& ddp, const dist::Zero* zero, int world);
// Bytes of the trainable parameters and of the reducer's gradient buffers and shards, plus `extra`.
int64_t model_state_bytes(dist::DistributedDataParallel& ddp, int64_t extra = 0);
// "memory_ledger" of the --metrics JSON: predicted and measured bytes; `mixed`: --amp (K = 12 for
// Adam: f32 masters beside the f32 state).
nlohmann::json ledger_json(const dist::MemoryLedger& m, bool mixed);

}  // namespace tandem::apps
