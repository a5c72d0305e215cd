// optim/cuda/sgd.cu: fused multi-tensor SGD - one kernel launch updates every parameter.
//
// Chunking: each parameter tensor is cut into chunks of at most kChunk = 32768 elements, and the
// chunks of all tensors are listed in one device array (the "chunk table"): {param, grad, buf,
// start, len, first}. Block b of the grid updates chunk b, its 256 threads striding over the chunk
// (128 elements each, coalesced). So the grid size is the chunk count, every block has the same
// bounded amount of work however uneven the tensor sizes are (a BN bias of 64 elements and a
// 100 M-element VGG weight share one launch), and there is no per-tensor launch overhead
// (~160 tensors in ResNet-50, each a 3-5 us launch otherwise).
// The table lives on the device and is re-uploaded only when the tensor list changes (new
// pointers, or the first step's buf = d_p turning into the momentum update), normally twice per
// run. Math in f32 whatever the storage dtype; order of operations as optim/sgd.cpp's CPU loop.
// The LR is read from device memory (a float next to the table), not passed as an argument: a
// kernel argument would be frozen by a CUDA graph capture (core/cuda/graph.h) at its captured value,
// while the schedule changes it every step. It is written when it changes, outside any capture
// (SGD::lr_changed), so a replayed step reads the LR set just before it. The write is a one-thread
// kernel taking the LR as its argument, not a cudaMemcpyAsync from host memory: a copy from
// pageable memory "might be synchronous with respect to host" (cuda_runtime_api.h, memcpy
// behaviour), which would stall the host behind the previous step every step - the launch
// overhead that graphs remove; a kernel argument is copied at launch, so nothing waits. The other
// hyper-parameters are constant for a run and stay arguments.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/graph_capture.h"
#include "core/ops/cuda/dispatch.cuh"
#include "optim/kernels/sgd.h"

namespace tandem::optim::kernels {
namespace {

constexpr int64_t kChunk = 32768;  // elements per block: 128 per thread at 256 threads
constexpr int kThreads = 256;

struct Chunk {
  void* param;
  const void* grad;
  void* buf;
  int64_t start;
  int32_t len;
  int32_t first;
};

template <typename T>
__global__ void sgd_kernel(const Chunk* __restrict__ chunks, const float* __restrict__ lr_dev, float momentum,
                           float damp_keep, float wd, bool nesterov) {
  const Chunk c = chunks[blockIdx.x];
  const float lr = *lr_dev;
  T* p = static_cast<T*>(c.param) + c.start;
  const T* g = static_cast<const T*>(c.grad) + c.start;
  T* buf = c.buf ? static_cast<T*>(c.buf) + c.start : nullptr;
  for (int i = threadIdx.x; i < c.len; i += blockDim.x) {
    float pv = cuda::to_float(p[i]);
    float d = cuda::to_float(g[i]) + wd * pv;
    if (buf) {
      float b = c.first ? d : momentum * cuda::to_float(buf[i]) + damp_keep * d;
      buf[i] = cuda::from_float<T>(b);
      d = nesterov ? d + momentum * b : b;
    }
    p[i] = cuda::from_float<T>(pv - lr * d);
  }
}

// The LR write (see the top): one value, stream-ordered before the steps that read it.
__global__ void set_lr_kernel(float* lr_dev, float lr) { *lr_dev = lr; }

bool same(const std::vector<SgdTensor>& a, const std::vector<SgdTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].param != b[i].param || a[i].grad != b[i].grad || a[i].buf != b[i].buf || a[i].numel != b[i].numel ||
        a[i].first != b[i].first)
      return false;
  return true;
}

}  // namespace

class SgdCudaTable {
 public:
  ~SgdCudaTable() {
    // Destructors must not throw: a failure here only leaks pool memory.
    if (dev_) (void)cudaFreeAsync(dev_, cuda::compute_stream(device_));
    if (lr_dev_) (void)cudaFreeAsync(lr_dev_, cuda::compute_stream(lr_device_));
  }
  // The device-side LR the kernel reads, uploaded when `lr` differs from the last upload. Inside a
  // graph capture an upload would be frozen into the graph, so it is refused there.
  const float* lr(int device, float lr) {
    if (lr_dev_ && device != lr_device_) {
      CUDA_CHECK(cudaFreeAsync(lr_dev_, cuda::compute_stream(lr_device_)));
      lr_dev_ = nullptr;
    }
    if (lr_dev_ && lr == lr_host_) return lr_dev_;
    TANDEM_CHECK(!graph_capture::active(device), "SGD: the LR changed (to ", lr, ") inside a CUDA graph capture, "
                 "where its upload would be frozen into the graph: call set_lr before capturing or replaying");
    cudaStream_t stream = cuda::compute_stream(device);
    if (!lr_dev_) CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&lr_dev_), sizeof(float), stream));
    lr_host_ = lr;
    set_lr_kernel<<<1, 1, 0, stream>>>(lr_dev_, lr);
    CUDA_CHECK_LAUNCH("writing the SGD learning rate to the device");
    lr_device_ = device;
    return lr_dev_;
  }
  bool has_lr() const { return lr_dev_ != nullptr; }
  int lr_device() const { return lr_device_; }
  // Returns the device table for `ts`, uploading it when it changed since the last call.
  const Chunk* get(int device, const std::vector<SgdTensor>& ts, int64_t& n_chunks) {
    if (!dev_ || device != device_ || !same(ts, key_)) rebuild(device, ts);
    n_chunks = static_cast<int64_t>(host_.size());
    return dev_;
  }

 private:
  void rebuild(int device, const std::vector<SgdTensor>& ts) {
    TANDEM_CHECK(!graph_capture::active(device), "SGD: the parameter list or momentum state changed inside a CUDA "
                 "graph capture (the chunk table would be re-uploaded from host memory): run eager steps until "
                 "the momentum buffers exist (at least two) before capturing");
    host_.clear();
    for (const auto& t : ts)
      for (int64_t s = 0; s < t.numel; s += kChunk)
        host_.push_back({t.param, t.grad, t.buf, s, static_cast<int32_t>(std::min(kChunk, t.numel - s)),
                         t.first ? 1 : 0});
    cudaStream_t stream = cuda::compute_stream(device);
    if (dev_ && (capacity_ < host_.size() || device != device_)) {
      CUDA_CHECK(cudaFreeAsync(dev_, cuda::compute_stream(device_)));
      dev_ = nullptr;
    }
    if (!dev_) {
      capacity_ = host_.size();
      CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&dev_), capacity_ * sizeof(Chunk), stream),
                 "allocating the SGD chunk table");
    }
    // Pageable source: the copy is staged before cudaMemcpyAsync returns, so host_ may change later.
    CUDA_CHECK(cudaMemcpyAsync(dev_, host_.data(), host_.size() * sizeof(Chunk), cudaMemcpyHostToDevice, stream));
    device_ = device;
    key_ = ts;
  }
  Chunk* dev_ = nullptr;
  size_t capacity_ = 0;
  int device_ = -1;
  std::vector<Chunk> host_;
  std::vector<SgdTensor> key_;
  float* lr_dev_ = nullptr;
  float lr_host_ = 0;
  int lr_device_ = -1;
};

void sgd_step_cuda(std::shared_ptr<SgdCudaTable>& table, DType dtype, int device, const std::vector<SgdTensor>& ts,
                   const SGDOptions& opt) {
  if (ts.empty()) return;
  if (!table) table = std::make_shared<SgdCudaTable>();
  int64_t n_chunks = 0;
  const Chunk* chunks = table->get(device, ts, n_chunks);
  if (n_chunks == 0) return;  // every tensor is empty
  TANDEM_CHECK(n_chunks < (int64_t{1} << 31), "SGD: ", n_chunks, " chunks exceed the grid limit");
  cudaStream_t stream = cuda::compute_stream(device);
  // The hyper-parameters go to the kernel as f32, rounded once from SGDOptions' doubles.
  const float* lr = table->lr(device, static_cast<float>(opt.lr));
  const float momentum = static_cast<float>(opt.momentum);
  const float dampening = static_cast<float>(opt.dampening), wd = static_cast<float>(opt.weight_decay);
  TANDEM_CUDA_FLOAT_TYPES(dtype, T, [&] {
    sgd_kernel<T><<<static_cast<unsigned>(n_chunks), kThreads, 0, stream>>>(chunks, lr, momentum, 1.0f - dampening,
                                                                              wd, opt.nesterov);
    CUDA_CHECK_LAUNCH("fused SGD step");
  });
}

void sgd_set_lr_cuda(const std::shared_ptr<SgdCudaTable>& table, float lr) {
  if (table && table->has_lr()) table->lr(table->lr_device(), lr);
}

}  // namespace tandem::optim::kernels
