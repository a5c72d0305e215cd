// core/ops/attention/cpu_flash.cpp: the CPU twin of the flash-attention kernels
// (core/ops/attention/cuda_flash.cu; semantics in core/ops/attention/kernels.h).
//
// This is AttentionBackend::Fused on the CPU. Its job is to be checkable where no GPU is: it runs
// the CUDA kernels' algorithm with their blocking, loop for loop. A block of kBlockRows query rows
// streams the keys in tiles of kTile; per tile and row it takes the tile's max, rescales the running
// sum and output by exp(m_old - m_new) and adds the tile's exp(z - m_new) terms (online softmax);
// the output is divided by the sum once at the end. Backward is FlashAttention-2's: d_row =
// dot(dO, O), then a dQ pass over key tiles per query block and a dK/dV pass over query tiles per
// key block, both recomputing p from the saved {m, 1/l}. What differs from the GPU is only the
// order of additions inside a tile (a warp's butterfly vs a sequential loop) and f32 vs f64 for f64
// tensors. It is not fast and does not try to be: Auto never picks it (the reference path, with
// OpenBLAS GEMMs, is the CPU's fast path).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/dropout/functors.h"
#include "core/ops/attention/kernels.h"

namespace tandem::kernels {
namespace {

using flash::kBlockKeys;
using flash::kBlockRows;
using flash::kTile;

// Accumulator type: f32 as on the GPU, except f64 tensors (gradient checks) accumulate in f64.
template <typename T> using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename A, typename T> A dot(const T* x, const T* y, int64_t n) {
  A s = 0;
  for (int64_t d = 0; d < n; ++d) s += static_cast<A>(x[d]) * static_cast<A>(y[d]);
  return s;
}

bool masked_key(const int32_t* mrow, int64_t j) { return mrow && mrow[j] == 0; }

template <typename T>
void forward(const FlashArgs& a, const T* q, const T* k, const T* v, const int32_t* mask, T* o, Acc<T>* stats) {
  using A = Acc<T>;
  const int64_t D = a.d;
  const fn::Dropout drop{a.dropout_p, a.seed, a.offset};
  const A keep_scale = A(1) / (A(1) - static_cast<A>(a.dropout_p));
  std::vector<A> z(kTile), pd(kTile);
  for (int64_t bh = 0; bh < a.bh; ++bh) {
    const int32_t* mrow = mask ? mask + (bh / a.heads) * a.sk : nullptr;
    const T* kh = k + bh * a.sk * D;
    const T* vh = v + bh * a.sk * D;
    for (int64_t q0 = 0; q0 < a.sq; q0 += kBlockRows) {  // one CUDA block
      const int64_t rows = std::min<int64_t>(kBlockRows, a.sq - q0);
      // Per-row state, as each warp holds it in registers: running max, running sum, output.
      std::vector<A> m(rows, static_cast<A>(kMaskedScore)), l(rows, A(0)), acc(rows * D, A(0));
      for (int64_t k0 = 0; k0 < a.sk; k0 += kTile) {
        const int64_t kn = std::min<int64_t>(kTile, a.sk - k0);  // keys past Sk do not exist (GPU: z = -inf)
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t row = bh * a.sq + q0 + r;
          A tile_max = -INFINITY;
          for (int64_t j = 0; j < kn; ++j) {
            z[j] = flash::logit(dot<A>(q + row * D, kh + (k0 + j) * D, D), static_cast<A>(a.scale),
                                masked_key(mrow, k0 + j));
            tile_max = std::max(tile_max, z[j]);
          }
          const A m_new = std::max(m[r], tile_max);
          const A alpha = std::exp(m[r] - m_new);  // 0 when the old max came from padded keys only
          A tile_sum = 0;
          for (int64_t j = 0; j < kn; ++j) {
            const A e = std::exp(z[j] - m_new);
            tile_sum += e;
            const uint64_t idx = static_cast<uint64_t>(row * a.sk + k0 + j);
            pd[j] = !a.dropout ? e : drop.keep(idx) ? e * keep_scale : A(0);
          }
          l[r] = l[r] * alpha + tile_sum;
          for (int64_t d = 0; d < D; ++d) {
            A s = acc[r * D + d] * alpha;
            for (int64_t j = 0; j < kn; ++j) s += pd[j] * static_cast<A>(vh[(k0 + j) * D + d]);
            acc[r * D + d] = s;
          }
          m[r] = m_new;
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = bh * a.sq + q0 + r;
        const A inv = A(1) / l[r];  // l >= 1: the max term contributes exp(0)
        for (int64_t d = 0; d < D; ++d) o[row * D + d] = static_cast<T>(acc[r * D + d] * inv);
        stats[2 * row] = m[r];
        stats[2 * row + 1] = inv;
      }
    }
  }
}

// The recomputed probability of (row, key) and the gradients reaching it, shared by both passes.
template <typename A> struct Recomputed {
  A p, y, ds;  // softmax prob, what the forward multiplied v by (after dropout), d(loss)/d(q.k)
};
template <typename A>
Recomputed<A> recompute(const FlashArgs& a, const fn::Dropout& drop, A keep_scale, A dot_qk, A dot_dov,
                        const A* st, A d_row, bool masked, uint64_t idx) {
  const A z = flash::logit(dot_qk, static_cast<A>(a.scale), masked);
  const A p = std::exp(z - st[0]) * st[1];
  const bool keep = !a.dropout || drop.keep(idx);
  const A y = !a.dropout ? p : keep ? p * keep_scale : A(0);
  const A dp = !a.dropout ? dot_dov : keep ? dot_dov * keep_scale : A(0);
  return {p, y, flash::dscore(p, dp, d_row, static_cast<A>(a.scale), masked)};
}

template <typename T>
void backward(const FlashArgs& a, const T* q, const T* k, const T* v, const T* o, const T* dout, const Acc<T>* stats,
              const int32_t* mask, T* dq, T* dk, T* dv) {
  using A = Acc<T>;
  const int64_t D = a.d, rows_total = a.bh * a.sq;
  const fn::Dropout drop{a.dropout_p, a.seed, a.offset};
  const A keep_scale = A(1) / (A(1) - static_cast<A>(a.dropout_p));
  // d_row = dot(dO, O) (the GPU's preprocessing kernel).
  std::vector<A> drow(rows_total);
  for (int64_t row = 0; row < rows_total; ++row) drow[row] = dot<A>(dout + row * D, o + row * D, D);

  // p, y and ds of (row, key) in head bh, recomputed as both GPU backward kernels do.
  auto at = [&](int64_t bh, int64_t row, int64_t key) {
    const int32_t* mrow = mask ? mask + (bh / a.heads) * a.sk : nullptr;
    const T* kv = k + (bh * a.sk + key) * D;
    const T* vv = v + (bh * a.sk + key) * D;
    return recompute<A>(a, drop, keep_scale, dot<A>(q + row * D, kv, D), dot<A>(dout + row * D, vv, D),
                        stats + 2 * row, drow[row], masked_key(mrow, key), static_cast<uint64_t>(row * a.sk + key));
  };

  // dQ pass: per block of query rows, stream key tiles (the GPU's dQ kernel).
  std::vector<A> acc;
  for (int64_t bh = 0; bh < a.bh; ++bh) {
    const T* kh = k + bh * a.sk * D;
    for (int64_t q0 = 0; q0 < a.sq; q0 += kBlockRows) {
      const int64_t rows = std::min<int64_t>(kBlockRows, a.sq - q0);
      acc.assign(rows * D, A(0));
      for (int64_t k0 = 0; k0 < a.sk; k0 += kTile) {
        const int64_t kn = std::min<int64_t>(kTile, a.sk - k0);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t row = bh * a.sq + q0 + r;
          for (int64_t j = 0; j < kn; ++j) {
            const int64_t key = k0 + j;
            const auto g = at(bh, row, key);
            for (int64_t d = 0; d < D; ++d) acc[r * D + d] += g.ds * static_cast<A>(kh[key * D + d]);
          }
        }
      }
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t d = 0; d < D; ++d) dq[(bh * a.sq + q0 + r) * D + d] = static_cast<T>(acc[r * D + d]);
    }
  }

  // dK/dV pass: per block of keys, stream query tiles (the GPU's dK/dV kernel).
  std::vector<A> acc_k, acc_v;
  for (int64_t bh = 0; bh < a.bh; ++bh) {
    for (int64_t k0 = 0; k0 < a.sk; k0 += kBlockKeys) {
      const int64_t keys = std::min<int64_t>(kBlockKeys, a.sk - k0);
      acc_k.assign(keys * D, A(0));
      acc_v.assign(keys * D, A(0));
      for (int64_t i0 = 0; i0 < a.sq; i0 += kTile) {
        const int64_t qn = std::min<int64_t>(kTile, a.sq - i0);
        for (int64_t kk = 0; kk < keys; ++kk) {
          const int64_t key = k0 + kk;
          for (int64_t i = 0; i < qn; ++i) {
            const int64_t row = bh * a.sq + i0 + i;
            const auto g = at(bh, row, key);
            for (int64_t d = 0; d < D; ++d) {
              acc_v[kk * D + d] += g.y * static_cast<A>(dout[row * D + d]);
              acc_k[kk * D + d] += g.ds * static_cast<A>(q[row * D + d]);
            }
          }
        }
      }
      for (int64_t kk = 0; kk < keys; ++kk)
        for (int64_t d = 0; d < D; ++d) {
          dk[(bh * a.sk + k0 + kk) * D + d] = static_cast<T>(acc_k[kk * D + d]);
          dv[(bh * a.sk + k0 + kk) * D + d] = static_cast<T>(acc_v[kk * D + d]);
        }
    }
  }
}

const int32_t* mask_data(const Tensor& mask) { return mask.defined() ? mask.data<int32_t>() : nullptr; }

}  // namespace

void flash_attention_fwd_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             const FlashArgs& a, Tensor& out, Tensor& stats) {
  TANDEM_CPU_WIDEN_16BIT(flash_attention_fwd_cpu, q, k, v, mask, a, out, stats);
  TANDEM_CPU_FLOAT_TYPES(q.dtype(), T, [&] {
    forward<T>(a, q.data<T>(), k.data<T>(), v.data<T>(), mask_data(mask), out.data<T>(), stats.data<Acc<T>>());
  });
}

void flash_attention_bwd_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                             const Tensor& stats, const Tensor& mask, const FlashArgs& a, Tensor& dq, Tensor& dk,
                             Tensor& dv) {
  TANDEM_CPU_WIDEN_16BIT(flash_attention_bwd_cpu, q, k, v, out, dout, stats, mask, a, dq, dk, dv);
  TANDEM_CPU_FLOAT_TYPES(q.dtype(), T, [&] {
    backward<T>(a, q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(), dout.data<T>(), stats.data<Acc<T>>(),
                mask_data(mask), dq.data<T>(), dk.data<T>(), dv.data<T>());
  });
}

}  // namespace tandem::kernels
