// core/autocast.h: the mixed-precision (AMP) policy - which ops compute in 16-bit and which in f32.
//
// This is the ONE place where that decision is written down; the op layer and the AMP model cast
// (layers/amp_cast.h) consult it, and tests/test_amp.cpp checks the table. "Low" below means the AMP
// dtype of the run (f16 or bf16); f32 means f32 whatever the run's dtype.
//
//   op              compute      output   parameters  why
//   conv2d          Low (*)      Low      Low         tensor cores; cuDNN/OpenBLAS accumulate in f32
//   linear/matmul   Low (*)      Low      Low         tensor cores; cuBLASLt/OpenBLAS accumulate in f32
//   attention       Low (*)      Low      -           GEMMs as above; softmax in f32 registers
//   softmax         f32          Low      -           the reference path's scale_mask_softmax: max,
//                                                     exp and row sum in f32 (CPU f64; masked: a floor)
//   elementwise     f32 per elt  Low      -           one rounding per element, nothing accumulates
//   gelu            f32 per elt  Low      -           erf form (BERT), or cuBLASLt's f32 epilogue
//   pools, dropout  f32 per elt  Low      -           as elementwise
//   embedding       copy         Low      Low         forward a gather; backward's scatter-add of
//                                                     repeated tokens (and of the tied MLM decoder)
//                                                     accumulates in f32 and rounds once
//   batch_norm      f32          Low      f32         mean/var of 16-bit values lose digits (f16 var
//                                                     overflows past 256^2); cuDNN takes 16-bit x with
//                                                     f32 scale, bias and statistics
//   layer_norm      f32          Low      Low (**)    statistics in f32 inside the kernel; the
//                                                     weight/bias gradients' column sums too
//   softmax-CE      f32          f32      -           log-sum-exp overflows f16; the loss is a sum
//   sum/mean        f32 (f64 CPU) Low     -           long reductions lose digits in 16-bit
//   loss scaling,   f32          f32      f32         optim/amp.h: master weights and the optimizer
//   optimizer                                          state never round
// (*) the CPU computes every 16-bit op in f32 and rounds its output once (core/ops/common/cpu/widen.h).
// (**) the layer_norm op takes weight and bias in x's dtype (core/ops/norm/norm.cpp); their f32 master
//      copies live in optim/amp.h like every other 16-bit parameter.
// No weight casts per step (issue 17.2): a Low parameter is stored in 16 bits and the optimizer's
// update writes it from its f32 master in the same pass (optim/amp.h), so forward and backward read
// it as it is; an F32 parameter (batch_norm's) is read in f32 by the op itself (cuDNN's and the CPU
// BN take f32 scale and bias with 16-bit x). So a step casts no weight: the launch counters
// (core/ops/copy/launch_count.h) hold the CPU to it, and the trainers' metrics report it.
// The encoder under AMP (train_encoder's mixed precision): LayerNorm, the attention softmax, the masked-LM
// cross-entropy and the embedding gradients' reductions run in f32 by the rows above; its
// parameters are all 16-bit with f32 masters (the tied decoder weight is the word embedding's).
#pragma once
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tandem::autocast {

enum class Precision { Low, F32 };  // Low: the run's 16-bit dtype

struct Rule {
  std::string op;        // "conv2d", "batch_norm", ... (the op names of core/ops)
  Precision compute;     // what the arithmetic runs in (accumulators are f32 either way)
  Precision output;      // dtype of the op's main output
  Precision parameters;  // dtype the op's parameters are stored in under AMP (Low: f32 master in optim)
  std::string reason;
};

// The table above, in that order.
const std::vector<Rule>& policy();
// The rule for `op`; fails with the list of known ops.
const Rule& rule(const std::string& op);

inline bool is_16bit(DType t) { return t == DType::F16 || t == DType::BF16; }
// The dtype of statistics (BN mean/var, layer_norm mean/rstd, cross-entropy lse and loss) for an
// input of dtype x: f64 for f64 inputs (gradient checks), f32 for everything else.
inline DType stats_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }
// The dtype an op's parameters have under AMP with 16-bit dtype `low`.
DType parameter_dtype(const std::string& op, DType low);
// "f16"/"bf16" -> the dtype; "off" is not an AMP dtype. Fails with the valid names.
DType amp_dtype_from_name(const std::string& name);

}  // namespace tandem::autocast
