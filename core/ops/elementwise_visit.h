// core/ops/elementwise_visit.h: the one mapping from an elementwise op code to its functor.
//
// Both backends call visit_unary/visit_binary with a callable that receives the functor object
// (fn::Relu{}, fn::Axpby{alpha, beta}, ...) and runs its own loop or kernel over it. Adding an op
// means one enum value (kernels/elementwise.h), one functor (functors.h) and one case here; the
// CPU loop and the CUDA kernel pick it up unchanged. Host code only (the switch runs before launch).
#pragma once
#include "core/check.h"
#include "core/ops/functors.h"
#include "core/ops/kernels/elementwise.h"

namespace tandem::kernels {

template <typename Run>
void visit_unary(Unary op, float alpha, Run&& run) {
  switch (op) {
    case Unary::Scale: return run(fn::Scale{alpha});
    case Unary::AddScalar: return run(fn::AddScalar{alpha});
    case Unary::Relu: return run(fn::Relu{});
    case Unary::Gelu: return run(fn::Gelu{});
    case Unary::Square: return run(fn::Square{});
    case Unary::Pow: return run(fn::Pow{alpha});
  }
  TANDEM_THROW("unknown unary op code ", static_cast<int>(op));
}

template <typename Run>
void visit_binary(Binary op, float alpha, float beta, Run&& run) {
  switch (op) {
    case Binary::Add: return run(fn::Add{});
    case Binary::Sub: return run(fn::Sub{});
    case Binary::Mul: return run(fn::Mul{});
    case Binary::Axpby: return run(fn::Axpby{alpha, beta});
    case Binary::ReluBackward: return run(fn::ReluBackward{});
    case Binary::GeluBackward: return run(fn::GeluBackward{});
    case Binary::PowBackward: return run(fn::PowBackward{alpha});
  }
  TANDEM_THROW("unknown binary op code ", static_cast<int>(op));
}

}  // namespace tandem::kernels
