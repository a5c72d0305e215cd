// core/autocast.cpp: the AMP policy table (see core/autocast.h for the reasons, in one view).
#include "core/autocast.h"

#include "core/check.h"

namespace tandem::autocast {

const std::vector<Rule>& policy() {
  using P = Precision;
  static const std::vector<Rule> table = {
      {"conv2d", P::Low, P::Low, P::Low, "tensor cores; cuDNN and OpenBLAS accumulate in f32"},
      {"linear", P::Low, P::Low, P::Low, "tensor cores; cuBLASLt and OpenBLAS accumulate in f32"},
      {"matmul", P::Low, P::Low, P::Low, "tensor cores; cuBLASLt and OpenBLAS accumulate in f32"},
      {"attention", P::Low, P::Low, P::Low, "GEMMs as matmul; the softmax runs in f32 registers"},
      {"softmax", P::F32, P::Low, P::Low,
       "scale_mask_softmax (the reference attention path): max, exp and the row sum in f32 (f64 on the CPU), "
       "masked keys at a finite floor; one rounding of each probability"},
      {"elementwise", P::F32, P::Low, P::Low, "one rounding per element, nothing accumulates"},
      {"gelu", P::F32, P::Low, P::Low,
       "erf form per element in f32 (or in cuBLASLt's f32 epilogue): one rounding"},
      {"pool", P::F32, P::Low, P::Low, "one rounding per element (max) or a short window (avg)"},
      {"dropout", P::F32, P::Low, P::Low, "one rounding per element"},
      {"embedding", P::Low, P::Low, P::Low,
       "forward a gather (no arithmetic); backward scatter-adds repeated tokens (and the tied MLM decoder's "
       "gradient lands in the same table) into an f32 accumulator, rounded once"},
      {"batch_norm", P::F32, P::Low, P::F32,
       "mean/var of 16-bit values lose digits (an f16 variance overflows past 256^2); cuDNN takes 16-bit x "
       "with f32 scale, bias and statistics"},
      {"layer_norm", P::F32, P::Low, P::Low,
       "statistics in f32 inside the kernel, and the weight/bias gradients' column sums over all tokens; weight "
       "and bias in x's dtype"},
      {"cross_entropy", P::F32, P::F32, P::Low, "log-sum-exp overflows f16, and the loss sums the batch"},
      {"sum", P::F32, P::Low, P::Low, "long reductions lose digits in 16-bit"},
      {"optimizer", P::F32, P::F32, P::F32, "master weights and optimizer state never round (optim/amp.h)"},
  };
  return table;
}

const Rule& rule(const std::string& op) {
  std::string known;
  for (const Rule& r : policy()) {
    if (r.op == op) return r;
    known += (known.empty() ? "" : ", ") + r.op;
  }
  TANDEM_THROW("autocast: no policy for op '", op, "'; known ops: ", known);
}

DType parameter_dtype(const std::string& op, DType low) {
  TANDEM_CHECK(is_16bit(low), "autocast: the AMP dtype must be f16 or bf16, got ", dtype_name(low));
  return rule(op).parameters == Precision::F32 ? DType::F32 : low;
}

DType amp_dtype_from_name(const std::string& name) {
  if (name == "bf16") return DType::BF16;
  if (name == "fp16" || name == "f16") return DType::F16;
  TANDEM_THROW("unknown AMP dtype '", name, "': use bf16 or fp16 (or off for f32 training)");
}

}  // namespace tandem::autocast
