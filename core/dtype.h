// core/dtype.h: element types and the host-side 16-bit float types.
//
// f16 and bf16 are stored as raw 16-bit patterns on the host (tandem::Half, tandem::BFloat16) so the
// CPU-only build needs no CUDA headers; they are bit-compatible with __half and __nv_bfloat16.
// Conversions round to nearest even, as the hardware does. CPU kernels compute in f32/f64 only: a
// 16-bit CPU tensor exists to be cast, copied and compared, not to run math on.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace tandem {

enum class DType : uint8_t { F32, F64, F16, BF16, I32, I64 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "f32", "f64", ... (the names used in flags and messages)
DType dtype_from_name(const std::string& name);  // throws with the list of valid names
inline bool is_floating(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) {
    uint32_t u = float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) { bits = 0x7fc0; return; }  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    bits = static_cast<uint16_t>(u >> 16);
  }
  explicit operator float() const { return bits_to_float(static_cast<uint32_t>(bits) << 16); }
};

struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  explicit operator float() const;
};

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::F16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BF16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };

}  // namespace tandem
