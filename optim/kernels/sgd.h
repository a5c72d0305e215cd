// optim/kernels.h: backend entry points of the fused optimizer updates (internal to optim/).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"

namespace tandem::optim::kernels {

// One parameter's update: all three pointers are on the same GPU and of the same dtype.
struct SgdTensor {
  void* param;
  const void* grad;
  void* buf;      // null when momentum == 0
  int64_t numel;
  bool first;     // buf has no history yet: write buf = d_p instead of the momentum update
};

struct SgdHyper {
  float lr, momentum, dampening, weight_decay;
  bool nesterov;
};

class SgdCudaTable;
#ifdef TANDEM_WITH_CUDA
// Updates every tensor in `ts` with ONE kernel launch on the compute stream. `table` caches the
// device-side chunk table between steps (rebuilt only when pointers or first-step flags change).
void sgd_step_cuda(std::shared_ptr<SgdCudaTable>& table, DType dtype, int device,
                   const std::vector<SgdTensor>& ts, const SgdHyper& h);
#endif

}  // namespace tandem::optim::kernels
