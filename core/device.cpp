// core/device.cpp: device parsing and GPU discovery.
#include "core/device.h"

#include <unistd.h>

#include <cstdio>
#include <sstream>

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

int cuda_device_count() { return probe_cuda().count; }

namespace {
// The machine has an NVIDIA GPU, whatever CUDA thinks: the kernel driver made a device node, or
// nvidia-smi (which talks to the driver, not to the runtime) lists one.
[[maybe_unused]] bool nvidia_gpu_installed() {  // used only by CUDA builds
  if (access("/dev/nvidia0", F_OK) == 0) return true;
  FILE* p = popen("nvidia-smi -L 2>/dev/null", "r");
  if (!p) return false;
  char line[256];
  bool any = false;
  while (fgets(line, sizeof line, p))
    if (std::string(line).rfind("GPU ", 0) == 0) any = true;
  pclose(p);
  return any;
}
}  // namespace

const CudaProbe& probe_cuda() {
  static const CudaProbe probe = [] {
    CudaProbe p;
#ifdef TANDEM_WITH_CUDA
    p.built = true;
    cudaDriverGetVersion(&p.driver_version);
    cudaRuntimeGetVersion(&p.runtime_version);
    int c = 0;
    cudaError_t e = cudaGetDeviceCount(&c);
    if (e != cudaSuccess) {
      p.error = std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
      cudaGetLastError();  // clear the error so later checks stay clean
      c = 0;
    }
    p.count = c;
    // Only asked when CUDA found nothing: on a working GPU machine the answer is already known.
    p.installed = c > 0 || nvidia_gpu_installed();
#endif
    return p;
  }();
  return probe;
}

std::string CudaProbe::str() const {
  if (!built) return "tandem was built without CUDA (-DTANDEM_CUDA=OFF)";
  auto ver = [](int v) { return v ? std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) : "unknown"; };
  std::ostringstream os;
  os << count << " usable GPU(s)";
  if (!error.empty()) os << "; cudaGetDeviceCount failed: " << error;
  os << "; NVIDIA GPU installed: " << (installed ? "yes" : "no") << "; driver supports CUDA "
     << ver(driver_version) << ", runtime is CUDA " << ver(runtime_version);
  return os.str();
}

void require_cuda(const std::string& who) {
  const CudaProbe& p = probe_cuda();
  if (p.usable()) return;
  if (!p.built) TANDEM_THROW(who, " needs a GPU, but tandem was built without CUDA: rebuild with -DTANDEM_CUDA=ON");
  if (p.broken())
    TANDEM_THROW(who, " needs a GPU. This machine has one, but CUDA cannot use it: ", p.str(),
                 ". A driver older than the runtime is the usual cause: update the driver, or build "
                 "against a CUDA toolkit the driver supports");
  TANDEM_THROW(who, " needs a GPU, and none is visible (", p.str(), "). Check CUDA_VISIBLE_DEVICES, or use the CPU");
}

#ifndef TANDEM_WITH_CUDA
std::string cuda_fault() { return ""; }
#endif

void set_device(Device d) {
  if (!d.is_cuda()) return;
#ifdef TANDEM_WITH_CUDA
  CUDA_CHECK(cudaSetDevice(d.index), "is cuda:", d.index, " a valid device on this machine?");
#else
  TANDEM_THROW("device ", d.str(), " requested, but tandem was built without CUDA (-DTANDEM_CUDA=OFF)");
#endif
}

}  // namespace tandem
