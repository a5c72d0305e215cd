// core/random.h: seeded random tensors, identical on every rank and device.
//
// A Generator is a seed plus an offset. Every draw consumes numel() counter values and advances the
// offset, so the sequence of draws (not the thread or device) determines the numbers. Values are
// generated on the host and copied, which keeps CPU and GPU init identical; init is not a hot path.
// Kernels that draw (dropout) reserve their counters with draw(): the same numbers as advance(),
// except inside a CUDA graph capture, where the base of the counters must come from device memory
// so that every replay draws new ones (core/graph_rng.h).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace tandem {

// The counters of one draw, as a kernel receives them: element i uses counter (offset + i) of the
// stream `seed`. When `slot` is set (only inside a captured CUDA graph, only for CUDA kernels) the
// seed and the base offset are read from device memory instead: seed = slot[0] and the first
// counter is slot[1] + offset (fn::with_slot, core/ops/dropout/functors.h).
struct RngDraw {
  uint64_t seed = 0;
  uint64_t offset = 0;
  const uint64_t* slot = nullptr;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }
  // Reserves n counter values and returns the first.
  uint64_t advance(uint64_t n) { uint64_t o = offset_; offset_ += n; return o; }
  // What a kernel on `device` needs to draw n counter values (see RngDraw). Eager, or on the CPU:
  // {seed(), advance(n), nullptr}, advance()'s numbers exactly. While a CUDA graph captures
  // `device`'s compute stream: the host offset does not move (the capture runs nothing); the open
  // GraphRng (core/graph_rng.h) hands out a device slot and an offset relative to it, and advances
  // the host offset by the step's draws before every replay. No GraphRng open: throws.
  RngDraw draw(uint64_t n, const Device& device);

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
