// core/random.h: seeded random tensors, identical on every rank and device.
//
// A Generator is a seed plus an offset. Every draw consumes numel() counter values and advances the
// offset, so the sequence of draws (not the thread or device) determines the numbers. Values are
// generated on the host and copied, which keeps CPU and GPU init identical; init is not a hot path.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace tandem {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }
  // Reserves n counter values and returns the first.
  uint64_t advance(uint64_t n) { uint64_t o = offset_; offset_ += n; return o; }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide default generator (seed 0 until manual_seed).
Generator& default_generator();
void manual_seed(uint64_t seed);

// In-place fills; not recorded by autograd.
void uniform_(Tensor& t, double lo, double hi, Generator& g = default_generator());
void normal_(Tensor& t, double mean, double stddev, Generator& g = default_generator());
// Normal values redrawn until within [mean - 2 std, mean + 2 std] (PyTorch's trunc_normal_ default).
void trunc_normal_(Tensor& t, double mean, double stddev, Generator& g = default_generator());
// Integers in [0, n).
void randint_(Tensor& t, int64_t n, Generator& g = default_generator());

Tensor randn(const Shape& shape, Generator& g, DType dtype = DType::F32, Device device = Device::cpu());
Tensor rand(const Shape& shape, Generator& g, DType dtype = DType::F32, Device device = Device::cpu());

}  // namespace tandem
