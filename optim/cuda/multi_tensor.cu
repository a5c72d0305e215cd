// optim/cuda/multi_tensor.cu: DeviceTable, DeviceValue and advance_counts (see optim/cuda/multi_tensor.cuh).
#include "optim/cuda/multi_tensor.cuh"

#include <algorithm>
#include <cstring>

#include "core/graph_capture.h"

namespace tandem::optim::kernels {
namespace {

__global__ void set_value_kernel(double* dst, double value) { *dst = value; }

__global__ void advance_counts_kernel(float* const* __restrict__ counts, int n, const float* __restrict__ found_inf) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && !skip_step(found_inf)) *counts[i] += 1.f;
}

}  // namespace

DeviceTable::~DeviceTable() {
  // Destructors must not throw: a failure here only leaks pool memory.
  if (dev_) (void)cudaFreeAsync(dev_, cuda::compute_stream(device_));
}

const void* DeviceTable::get(int device, const void* bytes, size_t n, const char* who) {
  if (dev_ && device == device_ && n == host_.size() && (n == 0 || std::memcmp(bytes, host_.data(), n) == 0))
    return dev_;
  TANDEM_CHECK(!graph_capture::active(device), who, ": the tensors of a fused update changed inside a CUDA graph "
               "capture (new tensors, tensors that gained or lost a gradient, or a first step), so its table would "
               "be uploaded from host memory into the graph: run the same step eagerly once before capturing, and "
               "capture only the capturable calls (Optimizer::step, MasterWeights::unscale_and_flag and "
               "copy_to_model(found_inf), GradClipper; not unscale_and_check or clip_grad_norm, which read their "
               "results on the host)");
  cudaStream_t stream = cuda::compute_stream(device);
  if (dev_ && (capacity_ < n || device != device_)) {
    CUDA_CHECK(cudaFreeAsync(dev_, cuda::compute_stream(device_)));
    dev_ = nullptr;
  }
  if (!dev_) {
    capacity_ = std::max<size_t>(n, 1);
    CUDA_CHECK(cudaMallocAsync(&dev_, capacity_, stream), "allocating an optimizer chunk table");
  }
  // Pageable source: the copy is staged before cudaMemcpyAsync returns, so `bytes` may change later.
  if (n > 0) CUDA_CHECK(cudaMemcpyAsync(dev_, bytes, n, cudaMemcpyHostToDevice, stream));
  const auto* b = static_cast<const unsigned char*>(bytes);
  host_.assign(b, b + n);
  device_ = device;
  return dev_;
}

DeviceValue::~DeviceValue() {
  if (dev_) (void)cudaFreeAsync(dev_, cuda::compute_stream(device_));
}

const double* DeviceValue::get(int device, double value, const char* who) {
  if (dev_ && device != device_) {
    CUDA_CHECK(cudaFreeAsync(dev_, cuda::compute_stream(device_)));
    dev_ = nullptr;
  }
  if (dev_ && value == host_) return dev_;
  TANDEM_CHECK(!graph_capture::active(device), who, ": the LR changed (to ", value, ") inside a CUDA graph capture, "
               "where its write would be frozen into the graph: call set_lr before capturing or replaying");
  cudaStream_t stream = cuda::compute_stream(device);
  if (!dev_) CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&dev_), sizeof(double), stream));
  set_value_kernel<<<1, 1, 0, stream>>>(dev_, value);
  CUDA_CHECK_LAUNCH("writing a learning rate to the device");
  host_ = value;
  device_ = device;
  return dev_;
}

void DeviceValue::set(double value, const char* who) {
  if (dev_) get(device_, value, who);
}

void advance_counts(DeviceTable& table, int device, const std::vector<float*>& counts, const float* found_inf,
                    const char* who) {
  if (counts.empty()) return;
  float* const* dev = table.get(device, counts, who);
  const int n = static_cast<int>(counts.size());
  advance_counts_kernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, cuda::compute_stream(device)>>>(dev, n,
                                                                                                        found_inf);
  CUDA_CHECK_LAUNCH("advancing the optimizer's update counts");
}

void check_grid(int64_t n_chunks, const char* what) {
  TANDEM_CHECK(n_chunks < (int64_t{1} << 31), what, ": ", n_chunks, " chunks exceed the grid limit");
}

}  // namespace tandem::optim::kernels
