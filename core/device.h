// core/device.h: where a tensor lives (cpu, cuda:N) and what the build/machine offers.
#pragma once
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
int cuda_device_count();
inline bool cuda_available() { return cuda_device_count() > 0; }
// Makes `index` the current GPU of this thread (no-op on CPU).
void set_device(Device d);

}  // namespace tandem
