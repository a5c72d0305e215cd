// optim/kernels/sgd.h: backend entry points of the SGD update (internal to optim/).
//
// The same scheme as core's ops (core/ops/ops.h): optim/sgd.cpp keeps the bookkeeping (slots,
// momentum buffers, grouping by device and dtype) and calls these; optim/cpu/sgd.cpp and
// optim/cuda/sgd.cu only compute. Both apply optim/sgd.h's update with the hyper-parameters of
// SGDOptions: the CPU in the tensor's dtype (f32/f64), CUDA in f32 whatever the storage dtype.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "optim/sgd.h"

namespace tandem::optim::kernels {

// One parameter, on the CPU. buf is written only when opt.momentum != 0 (it must then be defined);
// `first`: buf has no history yet, so buf = d_p instead of the momentum update.
void sgd_step_cpu(Tensor& param, const Tensor& grad, Tensor& buf, bool first, const SGDOptions& opt);

// One parameter's update: all three pointers are on the same GPU and of the same dtype.
struct SgdTensor {
  void* param;
  const void* grad;
  void* buf;      // null when momentum == 0
  int64_t numel;
  bool first;     // buf has no history yet: write buf = d_p instead of the momentum update
};

#ifdef TANDEM_WITH_CUDA
// Updates every tensor in `ts` with ONE kernel launch on the compute stream. `table` caches the
// device-side chunk table between steps (rebuilt only when pointers or first-step flags change).
void sgd_step_cuda(std::shared_ptr<SgdCudaTable>& table, DType dtype, int device, const std::vector<SgdTensor>& ts,
                   const SGDOptions& opt);
// Uploads a new LR to the table's device copy now (outside any graph capture), so that a replayed
// step reads it; a no-op before the first step (that step uploads it).
void sgd_set_lr_cuda(const std::shared_ptr<SgdCudaTable>& table, float lr);
#endif

}  // namespace tandem::optim::kernels
