// optim/cuda/multi_tensor.cu: DeviceTable (see optim/cuda/multi_tensor.cuh).
#include "optim/cuda/multi_tensor.cuh"

#include <algorithm>
#include <cstring>

namespace tandem::optim::kernels {

DeviceTable::~DeviceTable() {
  // Destructors must not throw: a failure here only leaks pool memory.
  if (dev_) (void)cudaFreeAsync(dev_, cuda::compute_stream(device_));
}

const void* DeviceTable::get(int device, const void* bytes, size_t n) {
  if (dev_ && device == device_ && n == host_.size() && (n == 0 || std::memcmp(bytes, host_.data(), n) == 0))
    return dev_;
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

void check_grid(int64_t n_chunks, const char* what) {
  TANDEM_CHECK(n_chunks < (int64_t{1} << 31), what, ": ", n_chunks, " chunks exceed the grid limit");
}

}  // namespace tandem::optim::kernels
