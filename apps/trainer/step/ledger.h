// apps/trainer/step/ledger.h: the memory ledger's inputs and JSON (dist/memory_ledger.h), from the
// Step's parts; memory.h's MemoryMeter predicts and measures with them.
//
// What the ledger needs from a step: the trainable parameter count and the largest gradient
// bucket (from DDP's reducer), this rank's ZeRO shard, and the bytes the model state already holds
// at set-up (parameters, gradient buckets and shards, AMP's f32 masters), which the measurement
// subtracts from the allocator's total to leave what is not model state (data, loaders). The
// optimizer's state bytes and mixed precision the Step fills in (Step::ledger_options).
// Library workspaces (cuBLASLt's 32 MiB per GPU) are neither predicted nor measured as model state:
// memory.h says how they once made the GPU's measurement 24 % high and how measure_state leaves them out.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

#include "dist/ddp.h"            // defines: DistributedDataParallel
#include "dist/measure/memory_ledger.h"  // defines: LedgerOptions, MemoryLedger
#include "dist/zero.h"           // defines: Zero

namespace tandem::trainer {

// params, largest_param, cpu_widen, largest_bucket, next_bucket, shard_params (zero null: -1), world and stage
// (zero's, or 0), and ZeRO-3's gathered working set.
dist::LedgerOptions ledger_inputs(dist::DistributedDataParallel& ddp, const dist::Zero* zero, int world);
// Bytes of the trainable parameters (ZeRO-3: this rank's shards of them; the gathered units are not
// model state) and of the reducer's gradient buffers and shards, plus `extra`.
int64_t model_state_bytes(dist::DistributedDataParallel& ddp, const dist::Zero* zero, int64_t extra = 0);
// "memory_ledger" of a trainer's metrics JSON: predicted and measured bytes; `mixed`: mixed
// precision (K = 12 for Adam: f32 masters beside the f32 state).
nlohmann::json ledger_json(const dist::MemoryLedger& m, bool mixed);

}  // namespace tandem::trainer
