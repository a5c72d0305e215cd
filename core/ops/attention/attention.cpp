// core/ops/attention/attention.cpp: checks, dispatch and autograd for scale_mask_softmax, the two attention
// paths (reference and cuDNN's fused SDPA) with Auto's choice between them, attention_qkv, and the
// head split/merge (see attention.h for the semantics and the policy).
//
// The mask is converted once per call to i32 on the scores' device (cast_raw is asynchronous on
// CUDA), so the kernels read one mask format whatever dtype the data pipeline produced.
#include "core/ops/attention/attention.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
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

// On the CPU, where reading the mask costs no sync, the right-padding promise is checked (attention.h):
// a pipeline that pads otherwise fails in the CPU tests instead of differing silently on the GPU.
void check_right_padded(const Tensor& m, const AttentionOptions& opt) {
  if (!m.defined() || !opt.mask_right_padded || m.is_cuda()) return;
  const int32_t* p = m.data<int32_t>();
  const int64_t B = m.size(0), S = m.size(1);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* row = p + b * S;
    int64_t n = 0;
    while (n < S && row[n] != 0) ++n;
    bool tail_zero = true;
    for (int64_t j = n; j < S; ++j) tail_zero = tail_zero && row[j] == 0;
    TANDEM_CHECK(n > 0 && tail_zero, "attention: AttentionOptions::mask_right_padded is set but row ", b,
                 " of the attention mask is ", n == 0 ? "all padding" : "not of the form 1...1 0...0",
                 "; pad on the right with at least one token per row, or clear mask_right_padded",
                 " (BertConfig::attention_mask_right_padded)");
  }
}

// Why the fused path cannot run a problem (attention.h's policy), "" when it can (cuDNN may still
// refuse the graph: sdpa_cudnn_prepare).
std::string why_not_fused(const Tensor& x, DType dtype, int64_t d, int64_t dv, int64_t sk, bool same_dtype,
                          const Tensor& mask, const AttentionOptions& opt) {
  if (!x.is_cuda()) return "it runs on CUDA only (cuDNN)";
  if (!same_dtype) return "q, k and v must share one dtype";
  if (dv != d) return "v's head dim differs from q's";
  if (sk == 0) return "there are no keys";
  if (mask.defined() && !opt.mask_right_padded)
    return "a mask is given without AttentionOptions::mask_right_padded (cuDNN takes padding as key lengths)";
#ifdef TANDEM_WITH_CUDA
  return kernels::sdpa_cudnn_unsupported(dtype, d);
#else
  return "this build has no CUDA";
#endif
}

#ifdef TANDEM_WITH_CUDA
// Where q, k or v lies: in inputs[input], `offset` elements from its start.
struct At {
  int input;
  int64_t offset;
};
template <typename P> P at_ptr(const std::vector<Tensor>& ts, At at) {
  const Tensor& t = ts[at.input];
  return reinterpret_cast<P>(static_cast<char*>(t.data_ptr()) + at.offset * dtype_size(t.dtype()));
}
const int32_t* i32_ptr(const Tensor& t) { return t.defined() ? static_cast<const int32_t*>(t.data_ptr()) : nullptr; }
const int64_t* i64_ptr(const Tensor& t) { return t.defined() ? static_cast<const int64_t*>(t.data_ptr()) : nullptr; }

// The backward's dO as the graph reads it: O's shape, dtype and layout (tensors are contiguous, so
// the same shape is the same strides), 16-byte aligned as cuDNN describes it. An incoming gradient in
// another dtype (a backward seeded in f32 for a bf16 output) is cast, a misaligned view copied.
Tensor sdpa_dout(const Tensor& g, const Tensor& o) {
  TANDEM_CHECK(g.shape() == o.shape(), "attention backward: the output's gradient is ", g.str(), " but the output is ",
               o.str(), "; pass a gradient of the output's shape");
  Tensor d = g.dtype() == o.dtype() ? g : cast_raw(g, o.dtype());
  if (reinterpret_cast<uintptr_t>(d.data_ptr()) % 16 != 0) d = d.clone();
  return d;
}

// The fused path on one problem whose q, k, v lie at `at` in `inputs` (one qkv buffer, or q, k, v)
// with the strides in `a`; the output is a new tensor of `out_shape` that a's o strides describe,
// and the backward writes d(inputs) through the same strides. Returns an undefined tensor, with
// `why` set, when cuDNN refuses the problem (nothing has run then).
Tensor fused_sdpa(const kernels::SdpaArgs& a, const std::vector<Tensor>& inputs, std::array<At, 3> at,
                  const Shape& out_shape, const Tensor& mask, Generator& gen, std::string& why) {
  if (!kernels::sdpa_cudnn_prepare(a, why)) return Tensor();
  const Tensor& x = inputs[0];
  Tensor lengths, rng;
  if (a.padded) {
    lengths = Tensor::empty({2 * a.b}, DType::I32, x.device());
    kernels::sdpa_lengths_cuda(mask, a.sq, lengths);
  }
  if (a.dropout_p > 0.0f) {  // the reference's reservation: B * H * Sq * Sk counters
    rng = Tensor::empty({2}, DType::I64, x.device());
    kernels::sdpa_rng_cuda(gen.draw(static_cast<uint64_t>(a.b * a.h * a.sq * a.sk), x.device()), rng);
  }
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  Tensor stats = Tensor::empty({a.b, a.h, a.sq}, DType::F32, x.device());
  kernels::sdpa_cudnn_fwd(a, at_ptr<const void*>(inputs, at[0]), at_ptr<const void*>(inputs, at[1]),
                          at_ptr<const void*>(inputs, at[2]), i32_ptr(lengths), i64_ptr(rng), out.data_ptr(),
                          static_cast<float*>(stats.data_ptr()));
  std::vector<Tensor> saved;
  for (const Tensor& t : inputs) saved.push_back(t.detach());
  autograd::record("SdpaBackward", inputs, out,
                   [a, at, saved, o = out.detach(), stats, lengths, rng](std::vector<Tensor>& g) {
                     const Tensor dout = sdpa_dout(g[0], o);
                     // Padded problems: cuDNN documents no write of dK, dV for keys past a sequence's
                     // length (their true gradient is 0), so d(inputs) starts zeroed - one memset of
                     // the qkv gradient, ~0.1% of a BERT step - rather than holding the pool's garbage.
                     std::vector<Tensor> grads;
                     for (const Tensor& t : saved)
                       grads.push_back(a.padded ? Tensor::zeros(t.shape(), t.dtype(), t.device()) : Tensor::empty_like(t));
                     kernels::sdpa_cudnn_bwd(a, at_ptr<const void*>(saved, at[0]), at_ptr<const void*>(saved, at[1]),
                                             at_ptr<const void*>(saved, at[2]), o.data_ptr(), dout.data_ptr(),
                                             static_cast<const float*>(stats.data_ptr()), i32_ptr(lengths),
                                             i64_ptr(rng), at_ptr<void*>(grads, at[0]), at_ptr<void*>(grads, at[1]),
                                             at_ptr<void*>(grads, at[2]));
                     return grads;
                   });
  return out;
}

// The problem's sizes and options for the fused path (the caller sets the strides).
kernels::SdpaArgs sdpa_args(int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D, DType t, float scale,
                            const Tensor& mask, const AttentionOptions& opt) {
  kernels::SdpaArgs a;
  a.b = B, a.h = H, a.sq = Sq, a.sk = Sk, a.d = D, a.dtype = t, a.scale = scale;
  a.dropout_p = opt.training ? opt.dropout_p : 0.0f;
  a.padded = mask.defined();
  return a;
}
void set_strides(int64_t (&dst)[3], int64_t batch, int64_t head, int64_t pos) {
  dst[0] = batch, dst[1] = head, dst[2] = pos;
}
#endif

// The fused path where the policy says so (run(why) performs it), else an undefined tensor: the
// caller then runs the reference path. Fused where it cannot run is an error that says why.
std::atomic<int64_t> g_fused_calls{0}, g_reference_calls{0};  // attention_path_stats, CUDA calls only

template <typename Run>
Tensor try_fused(const Tensor& x, const AttentionOptions& opt, const std::string& why_not, const char* op, Run run) {
  if (opt.backend == AttentionBackend::Reference) return Tensor();
  if (x.is_cuda()) (why_not.empty() ? g_fused_calls : g_reference_calls).fetch_add(1);
  TANDEM_CHECK(why_not.empty() || opt.backend == AttentionBackend::Auto, op,
               ": AttentionBackend::Fused cannot run these inputs: ", why_not,
               "; use AttentionBackend::Auto (which falls back to Reference) or Reference");
  if (!why_not.empty()) return Tensor();
  std::string refused;
  Tensor out = run(refused);
  if (!out.defined()) g_fused_calls.fetch_sub(1), g_reference_calls.fetch_add(1);  // cuDNN refused it
  TANDEM_CHECK(out.defined() || opt.backend == AttentionBackend::Auto, op,
               ": AttentionBackend::Fused: cuDNN refused the problem: ", refused,
               "; use AttentionBackend::Auto (which falls back to Reference) or Reference");
  return out;
}

float default_scale(const AttentionOptions& opt, int64_t D) {
  return opt.scale != 0.0f ? opt.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
}

void copy_cols(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col, int64_t width) {
  TANDEM_BACKEND(src, kernels::copy_columns_cpu(src, src_col, dst, dst_col, width),
                 kernels::copy_columns_cuda(src, src_col, dst, dst_col, width));
}

}  // namespace

AttentionPathStats attention_path_stats() { return {g_fused_calls.load(), g_reference_calls.load()}; }

std::string fused_attention_unsupported(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                        const AttentionOptions& opt) {
  return why_not_fused(q, q.dtype(), q.size(3), v.size(3), k.size(2),
                       q.dtype() == k.dtype() && q.dtype() == v.dtype(), mask, opt);
}

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
  check_same_device(q, k, "attention (k)");
  check_same_device(q, v, "attention (v)");
  const float scale = default_scale(opt, D);
  Tensor m = mask_i32(mask, B, Sk, q);
  check_right_padded(m, opt);
  Tensor fused = try_fused(q, opt, fused_attention_unsupported(q, k, v, m, opt), "attention", [&](std::string& why) {
#ifdef TANDEM_WITH_CUDA
    kernels::SdpaArgs a = sdpa_args(B, H, Sq, Sk, D, q.dtype(), scale, m, opt);
    set_strides(a.q_stride, H * Sq * D, Sq * D, D);  // [B, H, S, D] contiguous
    set_strides(a.o_stride, H * Sq * D, Sq * D, D);
    set_strides(a.k_stride, H * Sk * D, Sk * D, D);
    set_strides(a.v_stride, H * Sk * D, Sk * D, D);
    return fused_sdpa(a, {q, k, v}, {At{0, 0}, At{1, 0}, At{2, 0}}, q.shape(), m, gen, why);
#else
    why = "this build has no CUDA";
    return Tensor();
#endif
  });
  if (fused.defined()) return fused;
  Tensor q3 = reshape(q, {B * H, Sq, D}), k3 = reshape(k, {B * H, Sk, D}), v3 = reshape(v, {B * H, Sk, v.size(3)});
  Tensor scores = reshape(matmul(q3, k3, false, true), {B, H, Sq, Sk});
  Tensor p = scale_mask_softmax(scores, m, scale, opt.dropout_p, opt.training, gen);
  return reshape(matmul(reshape(p, {B * H, Sq, Sk}), v3), {B, H, Sq, v.size(3)});
}

Tensor attention_qkv(const Tensor& qkv, int64_t heads, const Tensor& mask, const AttentionOptions& opt,
                     Generator& gen) {
  TANDEM_CHECK(qkv.dim() == 3 && heads > 0 && qkv.size(2) % (3 * heads) == 0,
               "attention_qkv: expects the fused projection [B, S, 3 * heads * head_dim] with heads = ", heads,
               ", got ", qkv.str());
  const int64_t B = qkv.size(0), S = qkv.size(1), D = qkv.size(2) / (3 * heads);
  Tensor m = mask_i32(mask, B, S, qkv);
  check_right_padded(m, opt);
  const std::string why_not = why_not_fused(qkv, qkv.dtype(), D, D, S, true, m, opt);
  Tensor fused = try_fused(qkv, opt, why_not, "attention_qkv", [&](std::string& why) {
#ifdef TANDEM_WITH_CUDA
    // q, k, v in place at columns 0, H D, 2 H D: position stride 3 H D, head stride D. The output
    // [B, S, H, D] is [B, S, H * D]: position stride H D, what the output projection reads.
    const int64_t HD = heads * D;
    kernels::SdpaArgs a = sdpa_args(B, heads, S, S, D, qkv.dtype(), default_scale(opt, D), m, opt);
    set_strides(a.q_stride, S * 3 * HD, D, 3 * HD);
    set_strides(a.k_stride, S * 3 * HD, D, 3 * HD);
    set_strides(a.v_stride, S * 3 * HD, D, 3 * HD);
    set_strides(a.o_stride, S * HD, D, HD);
    return fused_sdpa(a, {qkv}, {At{0, 0}, At{0, HD}, At{0, 2 * HD}}, {B, S, HD}, m, gen, why);
#else
    why = "this build has no CUDA";
    return Tensor();
#endif
  });
  if (fused.defined()) return fused;
  // The reference: split, attention, merge - the same ops, counters and bits as calling them.
  AttentionOptions ref = opt;
  ref.backend = AttentionBackend::Reference;
  auto [q, k, v] = split_qkv_heads(qkv, heads);
  return merge_heads(attention(q, k, v, m, ref, gen));
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
