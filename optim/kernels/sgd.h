// optim/kernels/sgd.h: backend entry points of the SGD update (internal to optim/).
//
// The same scheme as core's ops (core/ops/ops.h): optim/sgd.cpp keeps the bookkeeping (slots,
// momentum buffers, update counts, grouping by device and dtype) and calls these; optim/cpu/sgd.cpp
// and optim/cuda/sgd.cu only compute. Both apply optim/sgd.h's update with the hyper-parameters of
// SGDOptions (optim/sgd_options.h): the CPU in the tensor's dtype (f32/f64), CUDA in f32 whatever the storage dtype.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "optim/kernels/low_copy.h"
#include "optim/sgd_options.h"

namespace tandem::optim::kernels {

// One parameter, on the CPU. buf is written only when opt.momentum != 0 (it must then be defined);
// `first`: buf has no history yet, so buf = d_p instead of the momentum update. `low` (undefined:
// none) gets the updated values rounded to 16 bits in the same loop (optim/kernels/low_copy.h).
void sgd_step_cpu(Tensor& param, const Tensor& grad, Tensor& buf, bool first, const SGDOptions& opt,
                  const Tensor& low = Tensor());

// One parameter's update: all pointers are on the same GPU; param, grad and buf of the same dtype.
struct SgdTensor {
  void* param;
  const void* grad;
  void* buf;      // null when momentum == 0
  float* count;   // the slot's update count (0-d f32): 0 means buf has no history yet, so the kernel
                  // writes buf = d_p instead of the momentum update; null when momentum == 0
  int64_t numel;
  void* low;      // the 16-bit working copy written in the same pass (f32 param); null: none
};

#ifdef TANDEM_WITH_CUDA
class SgdCudaTable;  // optim/cuda/sgd.cu: the cached device chunk table

// Updates every tensor in `ts` with ONE kernel launch on the compute stream, then advances their
// counts (a second, tiny launch; only with momentum). Skipped on the device where found_inf (null:
// never) is nonzero. `table` caches the device-side chunk table and LR between steps (the table is
// uploaded again only when the tensors change).
// `low`: the kind of every tensor's low copy (one per launch; None: no copies).
void sgd_step_cuda(std::shared_ptr<SgdCudaTable>& table, DType dtype, int device, const std::vector<SgdTensor>& ts,
                   const SGDOptions& opt, const float* found_inf, LowKind low);
// Writes a new LR to the table's device copy now (outside any graph capture), so that a replayed
// step reads it; a no-op before the first step (that step writes it).
void sgd_set_lr_cuda(const std::shared_ptr<SgdCudaTable>& table, double lr);
#endif

}  // namespace tandem::optim::kernels
