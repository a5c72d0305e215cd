// core/ops/dropout/dropout.cpp: dispatch and autograd for dropout (see dropout.h for the semantics).
//
// Each training call reserves numel() counter values from the generator (g.draw, which is
// g.advance's numbers outside a CUDA graph capture), so two calls never reuse a mask and replaying
// a generator state replays the masks, on either backend. Inside a capture the CUDA kernel reads
// the counters' base from the generator's device slot (core/graph_rng.h), so replays draw anew.
#include "core/ops/dropout/dropout.h"

#include "core/autograd.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/dropout/kernels.h"

namespace tandem::ops {
namespace {
Tensor apply(const Tensor& src, float p, const RngDraw& d) {
  Tensor dst = Tensor::empty_like(src);
  TANDEM_BACKEND(src, kernels::dropout_apply_cpu(src, dst, p, d.seed, d.offset),
                 kernels::dropout_apply_cuda(src, dst, p, d.seed, d.offset, d.slot));
  return dst;
}
}  // namespace

Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
  TANDEM_CHECK(p >= 0.0f && p <= 1.0f, "dropout probability must be in [0, 1], got ", p);
  if (!training || p == 0.0f) return x;  // identity: same tensor, same autograd history
  TANDEM_CHECK(is_floating(x.dtype()), "dropout needs a floating-point tensor, got ", x.str());
  const RngDraw d = gen.draw(static_cast<uint64_t>(x.numel()), x.device());
  Tensor y = apply(x, p, d);
  // The backward is the same masked scaling, recomputed from (seed, offset): no mask is saved.
  // (Under capture it reads the same slot within the same replay, so it gets the forward's mask.)
  autograd::record("DropoutBackward", {x}, y, [p, d](std::vector<Tensor>& g) {
    return std::vector<Tensor>{apply(g[0], p, d)};
  });
  return y;
}

}  // namespace tandem::ops
