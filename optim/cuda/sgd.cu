// optim/cuda/sgd.cu: fused multi-tensor SGD - one kernel launch updates every parameter.
//
// Chunking: each parameter tensor is cut into chunks of at most kChunk = 32768 elements, and the
// chunks of all tensors are listed in one device array (the "chunk table"): {param, grad, buf,
// count, start, len}. Block b of the grid updates chunk b, its 256 threads striding over the chunk
// (128 elements each, coalesced). So the grid size is the chunk count, every block has the same
// bounded amount of work however uneven the tensor sizes are (a BN bias of 64 elements and a
// 100 M-element VGG weight share one launch), and there is no per-tensor launch overhead
// (~160 tensors in ResNet-50, each a 3-5 us launch otherwise). The shared pieces (DeviceTable,
// DeviceValue, advance_counts) are optim/cuda/multi_tensor.cuh.
// The table lives on the device and is uploaded again only when the tensor list changes (new
// pointers: normally once per run, at the first step, when the momentum buffers appear). Math in
// f32 whatever the storage dtype; order of operations as optim/cpu/sgd.cpp's loop. Under AMP the
// loop also stores each updated f32 master into its 16-bit copy (optim/kernels/low_copy.h).
// What changes from step to step is read from device memory, never passed as a kernel argument
// (which a CUDA graph capture would freeze, core/cuda/graph.h):
//   - the LR: a DeviceValue that SGD::lr_changed writes outside any capture, so a replayed step
//     reads the LR set just before it;
//   - whether a momentum buffer holds history (buf = d_p at its first update): the slot's update
//     count, 0 until then, advanced by a second tiny launch after the update;
//   - the found-inf flag: nonzero skips the step on the device (buffers and counts untouched, so a
//     skipped first step leaves the next one a first step).
// The other hyper-parameters are constant for a run and stay arguments.
#include <vector>

#include "optim/cuda/multi_tensor.cuh"
#include "optim/kernels/sgd.h"

namespace tandem::optim::kernels {
namespace {

struct Chunk {  // 56 bytes, no padding (DeviceTable compares bytes)
  void* param;
  const void* grad;
  void* buf;
  const float* count;
  void* low;  // the segment's 16-bit copy (not offset); null: none
  int64_t start;
  int32_t len;
  int32_t unused = 0;
};

template <typename T>
__global__ void sgd_kernel(const Chunk* __restrict__ chunks, const double* __restrict__ lr_dev,
                           const float* __restrict__ found_inf, float momentum, float damp_keep, float wd,
                           bool nesterov, LowKind low_kind) {
  if (skip_step(found_inf)) return;
  const Chunk c = chunks[blockIdx.x];
  const float lr = static_cast<float>(*lr_dev);  // as the host's static_cast<float>(opt.lr)
  T* p = static_cast<T*>(c.param) + c.start;
  const T* g = static_cast<const T*>(c.grad) + c.start;
  T* buf = c.buf ? static_cast<T*>(c.buf) + c.start : nullptr;
  const bool first = c.count && *c.count == 0.f;
  void* low = low_at(c.low, c.start);
  for (int i = threadIdx.x; i < c.len; i += blockDim.x) {
    float pv = cuda::to_float(p[i]);
    float d = cuda::to_float(g[i]) + wd * pv;
    if (buf) {
      float b = first ? d : momentum * cuda::to_float(buf[i]) + damp_keep * d;
      buf[i] = cuda::from_float<T>(b);
      d = nesterov ? d + momentum * b : b;
    }
    const float nv = pv - lr * d;
    p[i] = cuda::from_float<T>(nv);
    store_low(low, i, nv, low_kind);  // T is f32 wherever there is a copy: nv is the stored master
  }
}

}  // namespace

class SgdCudaTable {
 public:
  DeviceTable chunks;
  DeviceTable counts;
  DeviceValue lr;
};

void sgd_step_cuda(std::shared_ptr<SgdCudaTable>& table, DType dtype, int device, const std::vector<SgdTensor>& ts,
                   const SGDOptions& opt, const float* found_inf, LowKind low) {
  if (ts.empty()) return;
  if (!table) table = std::make_shared<SgdCudaTable>();
  std::vector<Chunk> host;
  std::vector<float*> counts;
  for (const auto& t : ts) {
    for_each_chunk(t.numel, [&](int64_t s, int32_t len) { host.push_back({t.param, t.grad, t.buf, t.count, t.low, s, len}); });
    if (t.count) counts.push_back(t.count);
  }
  // The LR first: it is written on the first step even when every tensor is empty.
  const double* lr = table->lr.get(device, opt.lr, "SGD");
  if (!host.empty()) {
    check_grid(static_cast<int64_t>(host.size()), "SGD");
    const Chunk* chunks = table->chunks.get(device, host, "SGD");
    cudaStream_t stream = cuda::compute_stream(device);
    // The constant hyper-parameters go to the kernel as f32, rounded once from SGDOptions' doubles.
    const float momentum = static_cast<float>(opt.momentum);
    const float dampening = static_cast<float>(opt.dampening), wd = static_cast<float>(opt.weight_decay);
    TANDEM_CUDA_FLOAT_TYPES(dtype, T, [&] {
      sgd_kernel<T><<<static_cast<unsigned>(host.size()), kThreads, 0, stream>>>(chunks, lr, found_inf, momentum,
                                                                                 1.0f - dampening, wd, opt.nesterov, low);
      CUDA_CHECK_LAUNCH("fused SGD step");
    });
  }
  advance_counts(table->counts, device, counts, found_inf, "SGD");
}

void sgd_set_lr_cuda(const std::shared_ptr<SgdCudaTable>& table, double lr) {
  if (table) table->lr.set(lr, "SGD");
}

}  // namespace tandem::optim::kernels
