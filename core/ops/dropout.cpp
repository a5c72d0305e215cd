// core/ops/dropout.cpp: dispatch and autograd for dropout (see dropout.h for the semantics).
//
// Each training call reserves numel() counter values from the generator (g.advance), so two calls
// never reuse a mask and replaying a generator state replays the masks, on either backend.
#include "core/ops/dropout.h"

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/kernels/dropout.h"

namespace tandem::ops {
namespace {
Tensor apply(const Tensor& src, float p, uint64_t seed, uint64_t offset) {
  Tensor dst = Tensor::empty_like(src);
  TANDEM_BACKEND(src, kernels::dropout_apply_cpu(src, dst, p, seed, offset),
                 kernels::dropout_apply_cuda(src, dst, p, seed, offset));
  return dst;
}
}  // namespace

Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
  TANDEM_CHECK(p >= 0.0f && p <= 1.0f, "dropout probability must be in [0, 1], got ", p);
  if (!training || p == 0.0f) return x;  // identity: same tensor, same autograd history
  TANDEM_CHECK(is_floating(x.dtype()), "dropout needs a floating-point tensor, got ", x.str());
  const uint64_t seed = gen.seed();
  const uint64_t offset = gen.advance(static_cast<uint64_t>(x.numel()));
  Tensor y = apply(x, p, seed, offset);
  // The backward is the same masked scaling, recomputed from (seed, offset): no mask is saved.
  autograd::record("DropoutBackward", {x}, y, [p, seed, offset](std::vector<Tensor>& g) {
    return std::vector<Tensor>{apply(g[0], p, seed, offset)};
  });
  return y;
}

}  // namespace tandem::ops
