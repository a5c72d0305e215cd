// core/ops/elementwise/visit.h: turns an elementwise op code back into its functor (internal).
//
// Both backends call visit_unary/visit_binary with a callable that receives the functor object
// (fn::Relu{}, fn::Axpby{alpha, beta}, ...) and runs its own loop or kernel over it. The code is
// the functor's position in fn::UnaryOps / fn::BinaryOps (functors.h), so this file never changes
// when an op is added. Host code only (the lookup runs before launch).
#pragma once
#include "core/check.h"
#include "core/ops/elementwise/functors.h"
#include "core/ops/elementwise/kernels.h"

namespace tandem::kernels {

// F with its float fields filled from (alpha, beta) in declaration order (none, alpha, or both).
template <typename F>
F make_functor(float alpha, float beta) {
  if constexpr (requires { F{alpha, beta}; })
    return F{alpha, beta};
  else if constexpr (requires { F{alpha}; })
    return F{alpha};
  else
    return F{};
}

// Calls run(functor) for the functor at position `index` of the list.
template <typename... Fs, typename Run>
void visit_op(fn::OpList<Fs...>, int index, float alpha, float beta, Run&& run, const char* kind) {
  int i = 0;
  bool found = ((i++ == index ? (run(make_functor<Fs>(alpha, beta)), true) : false) || ...);
  TANDEM_CHECK(found, "unknown ", kind, " op code ", index);
}

template <typename Run>
void visit_unary(Unary op, float alpha, Run&& run) {
  visit_op(fn::UnaryOps{}, op.index, alpha, 0.0f, run, "unary");
}

template <typename Run>
void visit_binary(Binary op, float alpha, float beta, Run&& run) {
  visit_op(fn::BinaryOps{}, op.index, alpha, beta, run, "binary");
}

}  // namespace tandem::kernels
