// optim/cpu/amp.cpp: the fused unscale + inf/NaN check on the CPU (see optim/kernels/amp.h).
#include <cmath>

#include "core/check.h"

#include "optim/kernels/amp.h"

namespace tandem::optim::kernels {
namespace {

inline float widen(float v) { return v; }
inline float widen(Half v) { return static_cast<float>(v); }
inline float widen(BFloat16 v) { return static_cast<float>(v); }

template <typename S>
bool run(const std::vector<UnscalePair>& ts, float inv_scale) {
  bool found = false;
  for (const UnscalePair& p : ts) {
    const S* s = static_cast<const S*>(p.src);
    for (int64_t i = 0; i < p.numel; ++i) {
      const float v = widen(s[i]);
      found |= !std::isfinite(v);  // test the 16-bit value: inv_scale < 1 cannot hide an inf
      p.dst[i] = v * inv_scale;
    }
  }
  return found;
}

}  // namespace

bool unscale_check_cpu(DType src_dtype, const std::vector<UnscalePair>& ts, float inv_scale) {
  switch (src_dtype) {
    case DType::F32: return run<float>(ts, inv_scale);
    case DType::F16: return run<Half>(ts, inv_scale);
    case DType::BF16: return run<BFloat16>(ts, inv_scale);
    default: break;
  }
  TANDEM_THROW("unscale: gradients must be f32, f16 or bf16, got ", dtype_name(src_dtype));
}

}  // namespace tandem::optim::kernels
