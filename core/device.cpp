// core/device.cpp: device parsing and GPU discovery.
#include "core/device.h"

#include "core/check.h"
#ifdef TANDEM_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace tandem {

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    try {
      return cuda(std::stoi(s.substr(5)));
    } catch (...) {
    }
  }
  TANDEM_THROW("cannot parse device '", s, "': use cpu, cuda or cuda:N");
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

bool built_with_cuda() {
#ifdef TANDEM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef TANDEM_WITH_CUDA
  static const int n = [] {
    int c = 0;
    if (cudaGetDeviceCount(&c) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no device" error so later checks stay clean
      return 0;
    }
    return c;
  }();
  return n;
#else
  return 0;
#endif
}

void set_device(Device d) {
  if (!d.is_cuda()) return;
#ifdef TANDEM_WITH_CUDA
  CUDA_CHECK(cudaSetDevice(d.index), "is cuda:", d.index, " a valid device on this machine?");
#else
  TANDEM_THROW("device ", d.str(), " requested, but tandem was built without CUDA (-DTANDEM_CUDA=OFF)");
#endif
}

}  // namespace tandem
