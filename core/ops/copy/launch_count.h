// core/ops/copy/launch_count.h: per-process counts of cast and GEMM launches by dtype pair.
//
// Why: under AMP the question "which kernels does a step launch, and in which dtypes" must be
// answerable on the CPU, where no profiler sees GPU kernels. The cast op (ops::cast_raw, the
// master copy-back of optim/amp.h) and the GEMM dispatch (core/ops/matmul/matmul.cpp) count each
// launch here on BOTH backends, at the op layer, so a CPU step counts what the GPU step would
// launch. Not counted: the CPU backend's internal widening of 16-bit inputs to f32
// (core/ops/common/cpu/widen.h), which has no GPU counterpart.
//   cast_launches(): key (source dtype, destination dtype), one per cast kernel launch;
//   gemm_launches(): key (operand dtype, output dtype), one per GEMM (a batched GEMM is one);
//   misaligned_gemm_launches(): the same, for the 16-bit GEMMs that cannot run on tensor cores at
//     full speed because a stored row (leading dimension) is not a multiple of 8 elements = 16
//     bytes (cuBLAS's "Tensor Core Usage" rules): cuBLASLt then picks align-2/4 or SIMT kernels.
//     bert's MLM decoder over vocab 30522 (30522 % 8 = 2) is the known case: its GEMMs are the
//     `magma_sgemmEx` (bf16 in, f32 compute on CUDA cores) that issue 17.4 took for an f32 GEMM.
// The counts are relaxed atomics (any thread may launch); read them between steps. The trainers
// take the difference over a step for the metrics (apps/trainer/step/step.h, StepReport::casts).
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace tandem::ops {

class LaunchCounter {
 public:
  static constexpr int kTypes = 6;  // DType's enumerators (core/dtype.h)
  void add(DType from, DType to) { at(from, to).fetch_add(1, std::memory_order_relaxed); }
  int64_t count(DType from, DType to) const { return at(from, to).load(std::memory_order_relaxed); }
  int64_t total() const;  // every pair
  void reset();
  // Every pair's count (index from * kTypes + to): a step's launches are after minus before.
  using Counts = std::array<int64_t, kTypes * kTypes>;
  Counts snapshot() const;
  static Counts minus(const Counts& after, const Counts& before);
  static int64_t total(const Counts& c);
  static int64_t count(const Counts& c, DType from, DType to) { return c[idx(from, to)]; }
  // "f32->bf16: 12, bf16->f32: 3" (only nonzero pairs; "none" when all are 0): for logs and tests.
  static std::string summary(const Counts& c);
  std::string summary() const { return summary(snapshot()); }

 private:
  std::atomic<int64_t>& at(DType a, DType b) { return n_[idx(a, b)]; }
  const std::atomic<int64_t>& at(DType a, DType b) const { return n_[idx(a, b)]; }
  static size_t idx(DType a, DType b) { return static_cast<size_t>(a) * kTypes + static_cast<size_t>(b); }
  std::array<std::atomic<int64_t>, kTypes * kTypes> n_{};
};

LaunchCounter& cast_launches();
LaunchCounter& gemm_launches();
LaunchCounter& misaligned_gemm_launches();

}  // namespace tandem::ops
