// core/ops/attention/attention.cpp: checks, dispatch and autograd for scale_mask_softmax, the two attention
// paths (reference and flash) with Auto's choice between them, and the head split/merge (see
// attention.h for the semantics and the policy).
//
// The mask is converted once per call to i32 on the scores' device (cast_raw is asynchronous on
// CUDA), so the kernels read one mask format whatever dtype the data pipeline produced.
#include "core/ops/attention/attention.h"

#include <cmath>
#include <string>

#include "core/autograd.h"
#include "core/ops/copy/copy.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/attention/kernels.h"
#include "core/ops/shape/kernels.h"
#include "core/ops/matmul/matmul.h"
#include "core/ops/shape/shape.h"

namespace tandem::ops {
namespace {

// The key mask [batch, keys] as i32 on like's device (undefined stays undefined).
Tensor mask_i32(const Tensor& mask, int64_t batch, int64_t keys, const Tensor& like) {
  if (!mask.defined()) return Tensor();
  TANDEM_CHECK(mask.dim() == 2 && mask.size(0) == batch && mask.size(1) == keys,
               "attention: attention_mask must be [batch, keys] = [", batch, ", ", keys, "], got ", mask.str(),
               "; pass the tokenizer's [B, S] padding mask (1 = token, 0 = padding)");
  check_same_device(mask, like, "attention (mask)");
  return mask.dtype() == DType::I32 ? mask : cast_raw(mask, DType::I32);
}
Tensor mask_i32(const Tensor& mask, const Tensor& x) { return mask_i32(mask, x.size(0), x.size(3), x); }

Tensor transpose12_raw(const Tensor& x) {
  Tensor y = Tensor::empty({x.size(0), x.size(2), x.size(1), x.size(3)}, x.dtype(), x.device());
  TANDEM_BACKEND(x, kernels::transpose12_cpu(x, y), kernels::transpose12_cuda(x, y));
  return y;
}

// "" when the flash path (both backends) can run these inputs, else the reason.
std::string fused_unsupported(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t D = q.size(3);
  if (v.size(3) != D) return "v's head dim differs from q's";
  if (D % 8 != 0 || D > kernels::flash::kMaxHeadDim)
    return "the head dim must be a multiple of 8 and at most 128, got " + std::to_string(D);
  if (k.size(2) == 0) return "there are no keys";
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype()) return "q, k and v must share one dtype";
  const DType t = q.dtype();
  if (q.is_cuda() ? !(t == DType::F32 || t == DType::F16 || t == DType::BF16) : !(t == DType::F32 || t == DType::F64))
    return std::string("dtype ") + dtype_name(t) + " is not supported on this device";
  return "";
}

}  // namespace

bool auto_prefers_fused(bool cuda, DType dtype, int64_t prob_bytes) {
  return cuda && (dtype == DType::F16 || dtype == DType::BF16) && prob_bytes >= kAutoFusedMinBytes;
}

namespace {

// The flash path: one op with its own backward (kernels in core/ops/{cpu,cuda}/flash_attention.*).
// Saves q, k, v, the output and per-row {m, 1/l}: O(B H S D) memory, never the [Sq, Sk] probabilities.
Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, float scale,
                       const AttentionOptions& opt, Generator& gen) {
  check_same_device(q, k, "attention (k)");
  check_same_device(q, v, "attention (v)");
  Tensor m = mask_i32(mask, q.size(0), k.size(2), q);
  kernels::FlashArgs a;
  a.bh = q.size(0) * q.size(1);
  a.heads = q.size(1);
  a.sq = q.size(2);
  a.sk = k.size(2);
  a.d = q.size(3);
  a.scale = scale;
  a.dropout = opt.training && opt.dropout_p > 0.0f;
  a.dropout_p = opt.dropout_p;
  if (a.dropout) {  // the reference path reserves the same B * H * Sq * Sk counters
    a.seed = gen.seed();
    a.offset = gen.advance(static_cast<uint64_t>(a.bh * a.sq * a.sk));
  }
  Tensor out = Tensor::empty_like(q);
  Tensor stats = Tensor::empty({a.bh * a.sq, 2}, q.dtype() == DType::F64 ? DType::F64 : DType::F32, q.device());
  TANDEM_BACKEND(q, kernels::flash_attention_fwd_cpu(q, k, v, m, a, out, stats),
                 kernels::flash_attention_fwd_cuda(q, k, v, m, a, out, stats));
  autograd::record("FlashAttentionBackward", {q, k, v}, out,
                   [q = q.detach(), k = k.detach(), v = v.detach(), o = out.detach(), stats, m,
                    a](std::vector<Tensor>& g) {
                     Tensor dq = Tensor::empty_like(q), dk = Tensor::empty_like(k), dv = Tensor::empty_like(v);
                     TANDEM_BACKEND(q, kernels::flash_attention_bwd_cpu(q, k, v, o, g[0], stats, m, a, dq, dk, dv),
                                    kernels::flash_attention_bwd_cuda(q, k, v, o, g[0], stats, m, a, dq, dk, dv));
                     return std::vector<Tensor>{dq, dk, dv};
                   });
  return out;
}

void copy_cols(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col, int64_t width) {
  TANDEM_BACKEND(src, kernels::copy_columns_cpu(src, src_col, dst, dst_col, width),
                 kernels::copy_columns_cuda(src, src_col, dst, dst_col, width));
}

}  // namespace

Tensor scale_mask_softmax(const Tensor& x, const Tensor& mask, float scale, float dropout_p, bool training,
                          Generator& gen) {
  TANDEM_CHECK(x.dim() == 4, "scale_mask_softmax: scores must be [B, H, Sq, Sk], got ", x.str());
  TANDEM_CHECK(is_floating(x.dtype()), "scale_mask_softmax: scores must be floating point, got ", x.str());
  TANDEM_CHECK(dropout_p >= 0.0f && dropout_p < 1.0f, "scale_mask_softmax: dropout_p must be in [0, 1), got ",
               dropout_p);
  Tensor m = mask_i32(mask, x);
  kernels::SoftmaxArgs a;
  a.cols = x.size(3);
  a.rows = x.numel() / std::max<int64_t>(a.cols, 1);
  a.rows_per_batch = x.size(1) * x.size(2);
  a.scale = scale;
  a.dropout = training && dropout_p > 0.0f;
  a.dropout_p = dropout_p;
  if (a.dropout) {
    a.seed = gen.seed();
    a.offset = gen.advance(static_cast<uint64_t>(x.numel()));
  }
  Tensor probs = Tensor::empty_like(x);
  Tensor y = a.dropout ? Tensor::empty_like(x) : probs;
  TANDEM_BACKEND(x, kernels::scale_mask_softmax_fwd_cpu(x, m, a, probs, y),
                 kernels::scale_mask_softmax_fwd_cuda(x, m, a, probs, y));
  // Without dropout y and probs are one tensor: save a detached handle, never the output itself.
  autograd::record("ScaleMaskSoftmaxBackward", {x}, y, [probs = probs.detach(), m, a](std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty_like(probs);
    TANDEM_BACKEND(probs, kernels::scale_mask_softmax_bwd_cpu(probs, g[0], m, a, dx),
                   kernels::scale_mask_softmax_bwd_cuda(probs, g[0], m, a, dx));
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const AttentionOptions& opt,
                 Generator& gen) {
  TANDEM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention: q, k, v must be [B, H, S, D], got ",
               q.str(), ", ", k.str(), ", ", v.str());
  const int64_t B = q.size(0), H = q.size(1), Sq = q.size(2), D = q.size(3), Sk = k.size(2);
  TANDEM_CHECK(k.size(0) == B && k.size(1) == H && k.size(3) == D && v.size(0) == B && v.size(1) == H &&
                   v.size(2) == Sk,
               "attention: k and v must be [B, H, Sk, D] matching q ", q.str(), ", got ", k.str(), " and ", v.str());
  const float scale = opt.scale != 0.0f ? opt.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const std::string why_not = fused_unsupported(q, k, v);
  if (opt.backend == AttentionBackend::Fused)
    TANDEM_CHECK(why_not.empty(), "attention: AttentionBackend::Fused cannot run these inputs: ", why_not,
                 "; use AttentionBackend::Auto (which falls back to Reference) or Reference");
  const int64_t prob_bytes = B * H * Sq * Sk * static_cast<int64_t>(dtype_size(q.dtype()));
  const bool auto_fused = opt.backend == AttentionBackend::Auto && why_not.empty() &&
                          auto_prefers_fused(q.is_cuda(), q.dtype(), prob_bytes);
  if (opt.backend == AttentionBackend::Fused || auto_fused)
    return flash_attention(q, k, v, mask, scale, opt, gen);
  Tensor q3 = reshape(q, {B * H, Sq, D}), k3 = reshape(k, {B * H, Sk, D}), v3 = reshape(v, {B * H, Sk, v.size(3)});
  Tensor scores = reshape(matmul(q3, k3, false, true), {B, H, Sq, Sk});
  Tensor p = scale_mask_softmax(scores, mask, scale, opt.dropout_p, opt.training, gen);
  return reshape(matmul(reshape(p, {B * H, Sq, Sk}), v3), {B, H, Sq, v.size(3)});
}

std::array<Tensor, 3> split_qkv_heads(const Tensor& qkv, int64_t heads) {
  TANDEM_CHECK(qkv.dim() == 3 && heads > 0 && qkv.size(2) % (3 * heads) == 0,
               "split_qkv_heads: expects [B, S, 3 * heads * head_dim] with heads = ", heads, ", got ", qkv.str());
  const int64_t B = qkv.size(0), S = qkv.size(1), D = qkv.size(2) / (3 * heads), chunk = heads * S * D;
  // [B, S, 3H, D] -> [B, 3H, S, D]: per batch entry, q's heads, then k's, then v's, each [H, S, D].
  Tensor t = transpose12_raw(qkv.view({B, S, 3 * heads, D})).view({B, 3 * chunk});
  std::array<Tensor, 3> out;
  for (int i = 0; i < 3; ++i) {
    Tensor o = Tensor::empty({B, chunk}, qkv.dtype(), qkv.device());
    copy_cols(t, i * chunk, o, 0, chunk);
    out[i] = o.view({B, heads, S, D});
  }
  autograd::record("SplitQkvHeadsBackward", {qkv}, {&out[0], &out[1], &out[2]},
                   [B, S, D, heads, chunk](std::vector<Tensor>& g) {
                     // An output that got no gradient (unused) is undefined here: it contributes zeros.
                     const Tensor& any = g[0].defined() ? g[0] : g[1].defined() ? g[1] : g[2];
                     Tensor t = Tensor::empty({B, 3 * chunk}, any.dtype(), any.device());
                     for (int i = 0; i < 3; ++i) {
                       Tensor gi = g[i].defined() ? g[i] : Tensor::zeros({B, chunk}, t.dtype(), t.device());
                       copy_cols(gi.view({B, chunk}), 0, t, i * chunk, chunk);
                     }
                     Tensor back = transpose12_raw(t.view({B, 3 * heads, S, D}));
                     return std::vector<Tensor>{back.view({B, S, 3 * heads * D})};
                   });
  return out;
}

Tensor merge_heads(const Tensor& x) {
  TANDEM_CHECK(x.dim() == 4, "merge_heads: expects [B, H, S, D], got ", x.str());
  return reshape(transpose12(x), {x.size(0), x.size(2), x.size(1) * x.size(3)});
}

}  // namespace tandem::ops
