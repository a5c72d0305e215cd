// core/ops/graph_scalars/cuda.cu: the device scalars of a captured step (see kernels.h).
#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/graph_scalars/kernels.h"

namespace tandem::kernels {
namespace {
__global__ void write_rows_kernel(unsigned long long* table, RngSlotRows rows) {
  const int i = threadIdx.x;
  if (i < 2 * rows.rows) table[i] = rows.values[i];
}
__global__ void increment_kernel(long long* p, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    p[i] += 1;
}
}  // namespace

void rng_slots_write_cuda(Tensor& table, const RngSlotRows& rows) {
  TANDEM_CHECK(table.is_cuda() && table.dtype() == DType::I64 && table.numel() >= 2 * rows.rows &&
                   rows.rows <= RngSlotRows::kMax,
               "rng_slots_write_cuda: the slot table must be an i64 GPU tensor of at least ", 2 * rows.rows,
               " values, got ", table.str());
  if (rows.rows == 0) return;
  // The compute stream, where the graph replays: the write is ordered after the previous replay and
  // before the next (like every op, this launches on the current device, which must be the table's).
  write_rows_kernel<<<1, 2 * RngSlotRows::kMax, 0, cuda::compute_stream()>>>(
      static_cast<unsigned long long*>(table.data_ptr()), rows);
  CUDA_CHECK_LAUNCH("rng slot write");
}

void increment_i64_cuda(Tensor& t) {
  TANDEM_CHECK(t.is_cuda() && t.dtype() == DType::I64, "increment_i64_cuda needs an i64 GPU tensor, got ", t.str());
  const long long n = t.numel();
  if (n == 0) return;
  increment_kernel<<<cuda::grid_for(n), 256, 0, cuda::compute_stream()>>>(static_cast<long long*>(t.data_ptr()), n);
  CUDA_CHECK_LAUNCH("increment i64");
}

}  // namespace tandem::kernels
