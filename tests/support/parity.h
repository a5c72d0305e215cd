// tests/support/parity.h: CPU vs CUDA parity for an op, forward and backward.
//
// The CPU path is the reference. Inputs are fresh random f32 tensors (never zeros). For a 16-bit
// dtype, the inputs are first rounded to that dtype and widened back, so both backends see exactly
// the same values, and only the op's own arithmetic differs: the CPU computes in f32 from the
// rounded inputs, the GPU computes in `dtype` (with whatever internal precision its kernels use).
// The upstream gradient is random too, rounded the same way. Outputs and every input gradient are
// compared with |gpu - cpu| <= atol + rtol * |cpu| (+ max_rel * max|cpu|, see Tolerance); the first mismatches are printed so a person
// can judge them. Non-floating inputs (labels, indices) are copied unchanged.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/ops/matmul/matmul.h"
#include "core/tensor.h"

namespace tandem::testing {

struct Tolerance {
  double rtol;
  double atol;
  const char* why;  // the reason for these numbers, printed on failure
  // Adds max_rel * max|reference| to every element's bound. For results that come out of a
  // subtraction of rounded terms (softmax backward: p * (dy - sum p dy); attention output: a
  // weighted mean of +-1 values), the rounding error scales with the largest term, not with the
  // element, which can be near zero. 0 (the default): a purely element-wise bound.
  double max_rel = 0;
  // For the NaN/inf cases (tests/test_nonfinite_ops.cpp's rules on the GPU): a NaN matches a NaN and
  // an inf the same inf, and the scale for max_rel ignores them. Off (the default): any non-finite
  // value is a mismatch, so ordinary parity tests still catch a NaN the GPU should not produce.
  bool nonfinite_equal = false;
};

// The dtypes every parity test covers.
inline constexpr DType kParityDtypes[] = {DType::F32, DType::BF16, DType::F16};

// A tolerance for each tested dtype, written as a table so the three numbers and their reasons
// sit side by side: `const PerDtype my_tol{.f32 = ..., .bf16 = ..., .f16 = ...};` then my_tol(t).
// f32's entry also serves any other dtype (the harness only tests kParityDtypes).
struct PerDtype {
  Tolerance f32;
  Tolerance bf16;
  Tolerance f16;
  Tolerance operator()(DType t) const { return t == DType::BF16 ? bf16 : t == DType::F16 ? f16 : f32; }
};

// The tolerance for a result computed in f32 and rounded once to the tested dtype. atol stays small
// (1e-6) because many compared values are small (cross-entropy gradients ~1e-5 for C = 1000): a
// large atol would make those comparisons vacuous. f16 below 6.1e-5 is subnormal, with an absolute
// spacing of 6e-8, well inside 1e-6. `f32_why` says what separates the backends in f32.
inline PerDtype rounded_once(const char* f32_why) {
  return {.f32 = {1e-5, 1e-6, f32_why},
          .bf16 = {1e-2, 1e-6, "bf16: one rounding of an f32 result is up to 1 ulp = 2^-8 relative"},
          .f16 = {2e-3, 1e-6, "f16: one rounding of an f32 result is up to 1 ulp = 2^-11 relative"}};
}
inline Tolerance rounded_once(DType t, const char* f32_why) { return rounded_once(f32_why)(t); }

// Returns "" on success, else a report. `inputs` are CPU tensors (f32 or integer); floating inputs
// get requires_grad unless listed in `no_grad_inputs`.
std::string parity_check(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f,
                         const std::vector<Tensor>& inputs, DType dtype, Tolerance tol,
                         std::vector<size_t> no_grad_inputs = {}, uint64_t seed = 99);

// Compares two host value lists; returns "" or the first mismatches.
std::string compare_values(const std::string& what, const std::vector<float>& ref, const std::vector<float>& got,
                           Tolerance tol);

// Sets BackendConfig::allow_tf32 for a scope and puts the previous settings back on leaving it,
// also when a REQUIRE throws, so one test case cannot change the precision of the next.
class Tf32Scope {
 public:
  explicit Tf32Scope(bool on) : scope_(with_tf32(on)) {}
  Tf32Scope(const Tf32Scope&) = delete;
  Tf32Scope& operator=(const Tf32Scope&) = delete;

 private:
  static BackendConfig with_tf32(bool on) {
    BackendConfig c = backend();
    c.allow_tf32 = on;
    return c;
  }
  BackendScope scope_;
};

// The names a parity test file uses, in one line: `using namespace tandem::testing::parity_names;`.
namespace parity_names {
using testing::compare_values;
using testing::parity_check;
using testing::PerDtype;
using testing::Tf32Scope;
using testing::Tolerance;
inline constexpr const auto& kDtypes = kParityDtypes;
}  // namespace parity_names

}  // namespace tandem::testing
