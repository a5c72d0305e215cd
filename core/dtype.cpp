// core/dtype.cpp: dtype names and sizes, and IEEE half conversion (round to nearest even).
#include "core/dtype.h"

#include "core/check.h"

namespace tandem {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::F64: case DType::I64: return 8;
    case DType::F16: case DType::BF16: return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  return "?";
}

DType dtype_from_name(const std::string& n) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64})
    if (n == dtype_name(t)) return t;
  TANDEM_THROW("unknown dtype '", n, "': use one of f32, f64, f16, bf16, i32, i64");
}

Half::Half(float f) {
  uint32_t u = float_to_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) { bits = static_cast<uint16_t>(sign | 0x7e00u); return; }  // NaN
  if (absu >= 0x477ff000u) { bits = static_cast<uint16_t>(sign | 0x7c00u); return; }  // overflow -> inf
  if (absu < 0x38800000u) {  // subnormal half (or zero): scale into integer units of 2^-24
    float a = bits_to_float(absu);
    // 2^-24 is the smallest subnormal; nearbyint rounds to nearest even under the default mode.
    float q = a * 16777216.0f;
    uint32_t m = static_cast<uint32_t>(q);
    float rem = q - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    bits = static_cast<uint16_t>(sign | m);
    return;
  }
  uint32_t exp = ((absu >> 23) - 112u) << 10;  // rebias 127 -> 15
  uint32_t mant = absu & 0x7fffffu;
  uint32_t h = exp | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: correct
  bits = static_cast<uint16_t>(sign | h);
}

Half::operator float() const {
  uint32_t sign = (static_cast<uint32_t>(bits) & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  if (exp == 0) {  // zero or subnormal
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13));
  return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace tandem
