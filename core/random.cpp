// core/random.cpp: host-side generation from the counter-based stream, then copy.
#include "core/random.h"

#include <cmath>

#include "core/ops/copy/copy.h"
#include "core/ops/common/rng.h"

namespace tandem {
namespace {
Generator g_default(0);

// Fills a host f64 buffer with fn(counter_base + i), then converts and copies into t.
template <typename Fn>
void fill_from(Tensor& t, Fn fn) {
  Tensor host = Tensor::empty(t.shape(), DType::F64, Device::cpu());
  double* p = host.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = fn(i);
  Tensor typed = t.dtype() == DType::F64 ? host : ops::cast_raw(host, t.dtype());
  t.copy_(typed.device() == t.device() ? typed : typed.to(t.device()));
}

double box_muller(uint64_t seed, uint64_t idx) {
  // Two uniforms per normal; 1 - u keeps log() away from 0.
  double u1 = 1.0 - rng::uniform_f64(seed, 2 * idx);
  double u2 = rng::uniform_f64(seed, 2 * idx + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}
}  // namespace

Generator& default_generator() { return g_default; }
void manual_seed(uint64_t seed) { g_default.set_state(seed, 0); }

void uniform_(Tensor& t, double lo, double hi, Generator& g) {
  uint64_t base = g.advance(static_cast<uint64_t>(t.numel()));
  uint64_t seed = g.seed();
  fill_from(t, [&](int64_t i) { return lo + (hi - lo) * rng::uniform_f64(seed, base + i); });
}

void normal_(Tensor& t, double mean, double stddev, Generator& g) {
  uint64_t base = g.advance(2 * static_cast<uint64_t>(t.numel()));
  uint64_t seed = g.seed();
  fill_from(t, [&](int64_t i) { return mean + stddev * box_muller(seed, base / 2 + i); });
}

void trunc_normal_(Tensor& t, double mean, double stddev, Generator& g) {
  uint64_t base = g.advance(2 * static_cast<uint64_t>(t.numel()));
  uint64_t seed = g.seed();
  fill_from(t, [&](int64_t i) {
    // Redraws come from a second stream keyed by (seed, index, attempt) so the draw count is fixed.
    for (uint64_t attempt = 0;; ++attempt) {
      double z = box_muller(rng::mix64(seed + attempt), base / 2 + i);
      if (std::fabs(z) <= 2.0 || attempt > 64) return mean + stddev * std::fmax(-2.0, std::fmin(2.0, z));
    }
  });
}

void randint_(Tensor& t, int64_t n, Generator& g) {
  uint64_t base = g.advance(static_cast<uint64_t>(t.numel()));
  uint64_t seed = g.seed();
  fill_from(t, [&](int64_t i) {
    return static_cast<double>(static_cast<int64_t>(rng::uniform_f64(seed, base + i) * static_cast<double>(n)));
  });
}

Tensor randn(const Shape& shape, Generator& g, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  normal_(t, 0, 1, g);
  return t;
}

Tensor rand(const Shape& shape, Generator& g, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  uniform_(t, 0, 1, g);
  return t;
}

}  // namespace tandem
