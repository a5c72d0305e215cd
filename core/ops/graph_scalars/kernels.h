// core/ops/graph_scalars/kernels.h: the few device scalars a captured CUDA graph keeps up to date
// (internal; CUDA builds only). A graph freezes host values passed as kernel arguments, so state
// that changes every step lives in device memory and is written or stepped on the device:
//   - the RNG slot table (core/graph_rng.h): written by an eager launch before each replay;
//   - BatchNorm's num_batches_tracked (layers/norm.cpp): incremented inside the step.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace tandem::kernels {

#ifdef TANDEM_WITH_CUDA
// Rows of (seed, offset) for the slot table; 8 rows = RngLedger::kMaxGenerators.
struct RngSlotRows {
  static constexpr int kMax = 8;
  int rows = 0;
  uint64_t values[2 * kMax] = {};  // row r: values[2r] = seed, values[2r + 1] = offset
};
// table[0 .. 2 * rows) = values, one tiny kernel on the compute stream (the values travel as its
// arguments, so the host neither waits nor keeps a buffer alive).
void rng_slots_write_cuda(Tensor& table, const RngSlotRows& rows);
// t += 1 for an i64 tensor on the GPU, on the compute stream.
void increment_i64_cuda(Tensor& t);
#endif

}  // namespace tandem::kernels
