// core/ops/common/cpu/widen.h: runs a CPU kernel on f16/bf16 tensors by computing in f32 (internal).
//
// The CPU kernels are written for f32 and f64. Mixed precision (optim/amp.h) still has to run, and
// be tested, on the CPU, so a 16-bit CPU tensor stores 16-bit values and its math happens in f32:
//   TANDEM_CPU_WIDEN_16BIT(kernel, arg1, arg2, ...);
// placed first in a kernel entry point, checks the Tensor arguments. When one of them is f16/bf16 it
// widens every 16-bit tensor argument to an f32 copy, calls the kernel again on the copies (which
// then takes its f32 path) and rounds the 16-bit *output* arguments (those passed as a non-const
// Tensor&) back to their dtype, to nearest even. Tensors of other dtypes (f32 BatchNorm statistics,
// i64 labels) pass through untouched, so mixed-dtype calls keep their meaning.
//
// Numerics: each output is rounded once, from an f32 result (GEMMs and convolutions accumulate in
// f32 through OpenBLAS), which is what the GPU's tensor-core paths do. The copies cost one extra pass
// over the data; the CPU path is the reference, not the fast path.
// Left out: in-place aliasing between an input and an output argument is fine (the kernel reads the
// input copy and writes the output copy), but a kernel that reads an output before writing it gets
// the widened old values, as it would in f32.
#pragma once
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/ops/copy/kernels.h"
#include "core/tensor.h"

namespace tandem::kernels::widen {

inline bool is_16bit(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::F16 || t.dtype() == DType::BF16);
}

template <typename A>
bool arg_is_16bit(const A& a) {
  if constexpr (std::is_same_v<std::decay_t<A>, Tensor>)
    return is_16bit(a);
  else
    return false;
}

template <typename... A>
bool any_16bit(const A&... a) {
  return (arg_is_16bit(a) || ...);
}

inline Tensor to_f32(const Tensor& t) {
  if (!is_16bit(t)) return t;
  Tensor w = Tensor::empty(t.shape(), DType::F32, t.device());
  cast_cpu(t, w);
  return w;
}

// An output argument: the kernel writes `tmp` (f32), which is rounded back into `dst` afterwards.
struct Out {
  Tensor* dst;
  Tensor tmp;
  void write_back() {
    if (is_16bit(*dst)) cast_cpu(tmp, *dst);
  }
};

// What each argument becomes while the kernel runs.
template <typename A>
auto hold(A&& a) {
  using D = std::remove_reference_t<A>;
  if constexpr (std::is_same_v<D, Tensor>)
    return Out{&a, to_f32(a)};  // non-const Tensor&: an output (its old values are widened too)
  else if constexpr (std::is_same_v<D, const Tensor>)
    return to_f32(a);
  else
    return std::ref(a);  // scalars and argument structs, passed on unchanged
}

template <typename H>
decltype(auto) pass(H& h) {
  if constexpr (std::is_same_v<H, Out>)
    return static_cast<Tensor&>(h.tmp);
  else if constexpr (std::is_same_v<H, Tensor>)
    return static_cast<const Tensor&>(h);
  else
    return static_cast<H&>(h);  // make_tuple stored std::ref arguments as plain references
}

template <typename H>
void finish(H& h) {
  if constexpr (std::is_same_v<H, Out>) h.write_back();
}

// Calls fn on f32 stand-ins of the arguments (see the file comment) and returns its result.
template <typename Fn, typename... A>
auto call_f32(Fn&& fn, A&&... args) {
  auto held = std::make_tuple(hold(std::forward<A>(args))...);
  auto run = [&] { return std::apply([&](auto&... h) { return fn(pass(h)...); }, held); };
  if constexpr (std::is_void_v<decltype(run())>) {
    run();
    std::apply([](auto&... h) { (finish(h), ...); }, held);
  } else {
    auto r = run();
    std::apply([](auto&... h) { (finish(h), ...); }, held);
    return r;
  }
}

}  // namespace tandem::kernels::widen

// First statement of a CPU kernel entry point: with any f16/bf16 tensor argument, runs `kernel` in
// f32 on widened copies and returns (see the file comment).
#define TANDEM_CPU_WIDEN_16BIT(kernel, ...)                                                        \
  if (::tandem::kernels::widen::any_16bit(__VA_ARGS__))                                           \
  return ::tandem::kernels::widen::call_f32([&](auto&&... a) -> decltype(auto) { return kernel(a...); }, \
                                            __VA_ARGS__)
