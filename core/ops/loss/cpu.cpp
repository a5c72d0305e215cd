// core/ops/loss/cpu.cpp: cross-entropy and top-k counting on the CPU (the reference path).
//
// Row-wise, max-subtracted log-sum-exp, accumulated in double whatever T is: the CPU is what the
// parity tests trust, so it is the most accurate path, not the fastest. The label range has already
// been checked by core/ops/loss/loss.cpp.
#include <cmath>

#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/finite/functors.h"
#include "core/ops/loss/kernels.h"

namespace tandem::kernels {
void cross_entropy_fwd_cpu(const Tensor& logits, const Tensor& labels, float smoothing, Tensor& lse, Tensor& loss) {
  TANDEM_CPU_WIDEN_16BIT(cross_entropy_fwd_cpu, logits, labels, smoothing, lse, loss);
  TANDEM_CPU_FLOAT_TYPES(logits.dtype(), T, [&] {
    with_index_ptr(labels, [&](const auto* lab) {
      int64_t n = logits.size(0), c = logits.size(1);
      const T* x = logits.data<T>();
      T* plse = lse.data<T>();
      double s = smoothing, total = 0;
      for (int64_t i = 0; i < n; ++i) {
        const T* row = x + i * c;
        double m = row[0];
        for (int64_t j = 1; j < c; ++j) m = std::max(m, static_cast<double>(row[j]));
        double se = 0, sx = 0;
        for (int64_t j = 0; j < c; ++j) {
          se += std::exp(row[j] - m);
          sx += row[j];
        }
        double l = m + std::log(se);
        plse[i] = static_cast<T>(l);
        // -sum_c target_c log p_c with target = (1-s) onehot + s/C, and -log p_c = lse - x_c.
        total += l - (1.0 - s) * row[lab[i]] - (s / static_cast<double>(c)) * sx;
      }
      loss.data<T>()[0] = static_cast<T>(total / static_cast<double>(n));
    });
  });
}

void cross_entropy_bwd_cpu(const Tensor& logits, const Tensor& labels, const Tensor& lse, const Tensor& grad_loss,
                           float smoothing, Tensor& dlogits) {
  TANDEM_CPU_WIDEN_16BIT(cross_entropy_bwd_cpu, logits, labels, lse, grad_loss, smoothing, dlogits);
  TANDEM_CPU_FLOAT_TYPES(logits.dtype(), T, [&] {
    with_index_ptr(labels, [&](const auto* lab) {
      int64_t n = logits.size(0), c = logits.size(1);
      const T* x = logits.data<T>();
      const T* plse = lse.data<T>();
      T* d = dlogits.data<T>();
      double scale = static_cast<double>(grad_loss.data<T>()[0]) / static_cast<double>(n);
      double s = smoothing, off = s / static_cast<double>(c);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < c; ++j) {
          double p = std::exp(static_cast<double>(x[i * c + j]) - plse[i]);
          double target = off + (j == lab[i] ? 1.0 - s : 0.0);
          d[i * c + j] = static_cast<T>(scale * (p - target));
        }
      }
    });
  });
}

int64_t topk_correct_cpu(const Tensor& logits, const Tensor& labels, int k) {
  TANDEM_CPU_WIDEN_16BIT(topk_correct_cpu, logits, labels, k);
  return TANDEM_CPU_FLOAT_TYPES(logits.dtype(), T, [&] {
    int64_t correct = 0;
    with_index_ptr(labels, [&](const auto* lab) {
      int64_t n = logits.size(0), c = logits.size(1);
      const T* x = logits.data<T>();
      for (int64_t i = 0; i < n; ++i) {
        const int64_t label = static_cast<int64_t>(lab[i]);
        const T ref = x[i * c + label];
        int64_t above = 0;
        for (int64_t j = 0; j < c; ++j) above += fn::ranks_above(x[i * c + j], j, ref, label);
        correct += above < k;
      }
    });
    return correct;
  });
}

// ---- vocabulary-parallel pieces: doubles inside, like cross_entropy above ----

void cross_entropy_shard_stats_cpu(const Tensor& logits, const Tensor& targets, Tensor& stats) {
  TANDEM_CPU_WIDEN_16BIT(cross_entropy_shard_stats_cpu, logits, targets, stats);
  TANDEM_CPU_FLOAT_TYPES(logits.dtype(), T, [&] {
    const int64_t n = logits.size(0), c = logits.size(1);
    const T* x = logits.data<T>();
    const int64_t* t = targets.data<int64_t>();
    T* st = stats.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      const T* row = x + i * c;
      double m = row[0];
      for (int64_t j = 1; j < c; ++j) m = std::max(m, static_cast<double>(row[j]));
      double se = 0;
      for (int64_t j = 0; j < c; ++j) se += std::exp(row[j] - m);
      st[i] = static_cast<T>(m);
      st[n + i] = static_cast<T>(se);
      st[2 * n + i] = t[i] >= 0 ? row[t[i]] : T(0);
    }
  });
}

void cross_entropy_shard_combine_cpu(const Tensor& gathered, Tensor& lse, Tensor& loss) {
  TANDEM_CPU_FLOAT_TYPES(gathered.dtype(), T, [&] {
    const int64_t shards = gathered.size(0), n = gathered.size(2);
    const T* g = gathered.data<T>();
    T* l = lse.data<T>();
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      double big = g[i];  // M = max over shards of m_t
      for (int64_t s = 1; s < shards; ++s) big = std::max(big, static_cast<double>(g[s * 3 * n + i]));
      double se = 0, target = 0;
      for (int64_t s = 0; s < shards; ++s) {
        const T* part = g + s * 3 * n;
        se += std::exp(part[i] - big) * part[n + i];
        target += part[2 * n + i];  // one shard holds the label; the others add exact zeros
      }
      const double row_lse = big + std::log(se);
      l[i] = static_cast<T>(row_lse);
      total += row_lse - target;
    }
    loss.data<T>()[0] = static_cast<T>(total / static_cast<double>(n));
  });
}

void cross_entropy_shard_grad_cpu(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                  const Tensor& grad_loss, Tensor& dlogits) {
  TANDEM_CPU_WIDEN_16BIT(cross_entropy_shard_grad_cpu, logits, targets, lse, grad_loss, dlogits);
  TANDEM_CPU_FLOAT_TYPES(logits.dtype(), T, [&] {
    const int64_t n = logits.size(0), c = logits.size(1);
    const T* x = logits.data<T>();
    const int64_t* t = targets.data<int64_t>();
    const T* l = lse.data<T>();
    T* d = dlogits.data<T>();
    const double scale = static_cast<double>(grad_loss.data<T>()[0]) / static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j) {
        const double p = std::exp(static_cast<double>(x[i * c + j]) - l[i]);
        d[i * c + j] = static_cast<T>(scale * (p - (j == t[i] ? 1.0 : 0.0)));
      }
  });
}

}  // namespace tandem::kernels
