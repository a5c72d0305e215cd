// core/device.h: where a tensor lives (cpu, cuda:N) and what the build/machine offers.
#pragma once
#include <cstdint>
#include <string>

namespace tandem {

struct Device {
  enum class Type : uint8_t { CPU, CUDA };
  Type type = Type::CPU;
  int index = 0;

  static Device cpu() { return {Type::CPU, 0}; }
  static Device cuda(int i = 0) { return {Type::CUDA, i}; }
  static Device parse(const std::string& s);  // "cpu", "cuda", "cuda:1"
  bool is_cpu() const { return type == Type::CPU; }
  bool is_cuda() const { return type == Type::CUDA; }
  std::string str() const;
  bool operator==(const Device&) const = default;
};

// True when tandem was built with its CUDA backend.
bool built_with_cuda();
// Number of visible GPUs; 0 in a CPU-only build or on a machine without a GPU (never throws).
// Also 0 when a GPU is installed but CUDA cannot use it: ask probe_cuda() which of the two it is.
int cuda_device_count();
inline bool cuda_available() { return cuda_device_count() > 0; }

// What CUDA says about this machine, so that "no GPU" and "a GPU that does not work" are never
// confused. A GPU counts as installed when /dev/nvidia0 exists or `nvidia-smi -L` lists one; it is
// usable when cudaGetDeviceCount succeeds with a count > 0. The typical broken case is a driver
// older than the CUDA runtime tandem was built with (cudaErrorInsufficientDriver).
struct CudaProbe {
  bool built = false;       // tandem has its CUDA backend
  bool installed = false;   // the machine has an NVIDIA GPU (device node or nvidia-smi)
  int count = 0;            // devices the runtime can use
  std::string error;        // the runtime's error name and text when it failed, else empty
  int driver_version = 0;   // cudaDriverGetVersion (e.g. 13000 = 13.0); 0 when unknown
  int runtime_version = 0;  // cudaRuntimeGetVersion of the runtime tandem links
  bool usable() const { return count > 0; }
  bool broken() const { return built && installed && count == 0; }  // a GPU is there but CUDA fails
  std::string str() const;  // one line: count, error, driver and runtime versions
};
const CudaProbe& probe_cuda();  // computed once per process
// Throws a tandem::Error naming the CUDA error and the driver/runtime versions when `who` asked for
// a GPU and none is usable. Use it wherever a GPU was explicitly requested (a cuda device, GPU
// tests on a GPU machine): a silent fall-back to the CPU would make every figure a lie.
void require_cuda(const std::string& who);
// A sticky CUDA error on the current device ("cudaErrorIllegalAddress (...)"), or "" when there is
// none or in a CPU-only build. Never blocks. The dist/ watchdog asks this before blaming a peer: a
// rank whose kernel faulted also stops reaching collectives, and the fault is the real cause.
std::string cuda_fault();
// Makes `index` the current GPU of this thread (no-op on CPU).
void set_device(Device d);

}  // namespace tandem
