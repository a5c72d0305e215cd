// core/ops/loss/loss.cpp: validation, backend dispatch and autograd for cross-entropy and top-k accuracy.
//
// Label range: a wrong label is almost always a data-pipeline bug (class ids counted from 1, or a
// dataset with more classes than the model), and a readable error beats a NaN loss. CPU labels
// are checked here. CUDA labels are not: copying them back would sync the host every step, so
// the loader checks them on the host instead and the CUDA kernels clamp and count (loss.h).
// topk_correct returns a host number and the ignore_index overload picks rows on the host (both
// sync anyway), so they check labels on both backends.
// Statistics (lse, loss) are f32 for f32/f16/bf16 logits and f64 for f64 logits (gradient checks).
#include "core/ops/loss/loss.h"

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/device.h"
#include "core/ops/copy/copy.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/elementwise/elementwise.h"
#include "core/ops/embedding/embedding.h"
#include "core/ops/loss/kernels.h"
#include "core/ops/reduce/reduce.h"

namespace tandem::ops {
namespace {

void check_inputs(const Tensor& logits, const Tensor& labels, const char* op) {
  TANDEM_CHECK(logits.dim() == 2, op, ": logits must be [N, C], got ", logits.str(),
               "; flatten the leading dimensions first");
  TANDEM_CHECK(is_floating(logits.dtype()), op, ": logits must be floating point, got ", logits.str());
  TANDEM_CHECK(labels.dtype() == DType::I64 || labels.dtype() == DType::I32, op,
               ": labels must be i64 (or i32) class indices, got ", labels.str());
  TANDEM_CHECK(labels.dim() == 1 && labels.size(0) == logits.size(0), op, ": labels ", labels.str(),
               " do not match logits ", logits.str(), "; expected one label per row, shape [",
               logits.size(0), "]");
  TANDEM_CHECK(logits.size(0) > 0 && logits.size(1) > 0, op, ": empty logits ", logits.str());
  check_same_device(logits, labels, op);
}

void check_label_range(const Tensor& labels, int64_t classes, const char* op) {
  std::vector<int64_t> v = labels.to_vector_i64();  // copies (and syncs) when labels are on a GPU
  for (size_t i = 0; i < v.size(); ++i)
    TANDEM_CHECK(v[i] >= 0 && v[i] < classes, op, ": label ", v[i], " at row ", i, " is outside [0, ", classes,
                 "); labels must be class indices counted from 0, and the model needs one output per class");
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, float label_smoothing) {
  check_inputs(logits, labels, "cross_entropy");
  TANDEM_CHECK(label_smoothing >= 0.0f && label_smoothing <= 1.0f,
               "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  if (!logits.is_cuda()) check_label_range(labels, logits.size(1), "cross_entropy");
  DType st = autocast::stats_dtype(logits.dtype());  // the AMP policy: f32 loss for 16-bit logits
  Tensor lse = Tensor::empty({logits.size(0)}, st, logits.device());
  Tensor loss = Tensor::empty({1}, st, logits.device());
  TANDEM_BACKEND(logits, kernels::cross_entropy_fwd_cpu(logits, labels, label_smoothing, lse, loss),
                 kernels::cross_entropy_fwd_cuda(logits, labels, label_smoothing, lse, loss));
  autograd::record("CrossEntropyBackward", {logits, labels}, loss,
                   [logits = logits.detach(), labels, lse, st, s = label_smoothing](std::vector<Tensor>& g) {
                     // A caller-provided root gradient may come in another dtype: bring it to ours.
                     Tensor gl = g[0].dtype() == st ? g[0] : cast_raw(g[0], st);
                     Tensor d = Tensor::empty_like(logits);
                     TANDEM_BACKEND(logits, kernels::cross_entropy_bwd_cpu(logits, labels, lse, gl, s, d),
                                    kernels::cross_entropy_bwd_cuda(logits, labels, lse, gl, s, d));
                     return std::vector<Tensor>{d, Tensor()};
                   });
  return loss;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, float label_smoothing, int64_t ignore_index) {
  check_inputs(logits, labels, "cross_entropy");
  // The rows to keep are decided on the host, so this overload copies the labels (and syncs) on
  // CUDA; since they are here anyway, the kept labels are range-checked on both backends.
  std::vector<int64_t> v = labels.to_vector_i64();
  std::vector<int64_t> rows, kept;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == ignore_index) continue;
    TANDEM_CHECK(v[i] >= 0 && v[i] < logits.size(1), "cross_entropy: label ", v[i], " at row ", i, " is outside [0, ",
                 logits.size(1), ") and is not ignore_index (", ignore_index,
                 "); labels must be class indices counted from 0, and the model needs one output per class");
    rows.push_back(static_cast<int64_t>(i));
    kept.push_back(v[i]);
  }
  if (kept.size() == v.size()) return cross_entropy(logits, labels, label_smoothing);
  if (kept.empty()) return scale(sum(logits), 0.0f);  // 0, still connected to the graph
  const auto n = static_cast<int64_t>(kept.size());
  Tensor idx = Tensor::from_vector_i64(rows, {n}, DType::I64, logits.device());
  Tensor lab = Tensor::from_vector_i64(kept, {n}, DType::I64, logits.device());
  return cross_entropy(embedding(idx, logits), lab, label_smoothing);
}

int64_t take_bad_label_count() {
#ifdef TANDEM_WITH_CUDA
  if (!cuda_available()) return 0;  // no CUDA tensor can exist, so no label was clamped
  return kernels::take_bad_label_count_cuda();
#else
  return 0;
#endif
}

int64_t topk_correct(const Tensor& logits, const Tensor& labels, int k) {
  check_inputs(logits, labels, "topk_correct");
  TANDEM_CHECK(k >= 1, "topk_correct: k must be at least 1, got ", k);
  check_label_range(labels, logits.size(1), "topk_correct");
  int64_t n = 0;
  TANDEM_BACKEND(logits, n = kernels::topk_correct_cpu(logits, labels, k),
                 n = kernels::topk_correct_cuda(logits, labels, k));
  return n;
}

// ---- vocabulary-parallel pieces ----

namespace {
void check_shard(const Tensor& logits, const Tensor& targets, const char* op) {
  TANDEM_CHECK(logits.dim() == 2 && logits.size(0) > 0 && logits.size(1) > 0 && is_floating(logits.dtype()), op,
               ": logits must be a non-empty floating [N, Cr] shard, got ", logits.str());
  TANDEM_CHECK(targets.dtype() == DType::I64 && targets.dim() == 1 && targets.size(0) == logits.size(0), op,
               ": targets must be i64 [", logits.size(0), "] (label - start, or -1 for another shard's label), got ",
               targets.str());
  check_same_device(logits, targets, op);
}
}  // namespace

Tensor cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets) {
  check_shard(logits, targets, "cross_entropy_shard_stats");
  Tensor stats = Tensor::empty({3, logits.size(0)}, autocast::stats_dtype(logits.dtype()), logits.device());
  Tensor x = logits.detach();
  TANDEM_BACKEND(x, kernels::cross_entropy_shard_stats_cpu(x, targets, stats),
                 kernels::cross_entropy_shard_stats_cuda(x, targets, stats));
  return stats;
}

std::array<Tensor, 2> cross_entropy_shard_combine(const Tensor& gathered) {
  TANDEM_CHECK(gathered.dim() == 3 && gathered.size(0) >= 1 && gathered.size(1) == 3 && gathered.size(2) > 0 &&
                   (gathered.dtype() == DType::F32 || gathered.dtype() == DType::F64),
               "cross_entropy_shard_combine: expects every shard's statistics [T, 3, N] in f32 or f64 (what "
               "cross_entropy_shard_stats returns, gathered), got ", gathered.str());
  const int64_t n = gathered.size(2);
  Tensor lse = Tensor::empty({n}, gathered.dtype(), gathered.device());
  Tensor loss = Tensor::empty({1}, gathered.dtype(), gathered.device());
  TANDEM_BACKEND(gathered, kernels::cross_entropy_shard_combine_cpu(gathered, lse, loss),
                 kernels::cross_entropy_shard_combine_cuda(gathered, lse, loss));
  return {lse, loss};
}

Tensor cross_entropy_shard_grad(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                const Tensor& grad_loss) {
  check_shard(logits, targets, "cross_entropy_shard_grad");
  const DType st = autocast::stats_dtype(logits.dtype());
  TANDEM_CHECK(lse.dtype() == st && lse.numel() == logits.size(0), "cross_entropy_shard_grad: lse must be ",
               dtype_name(st), " [", logits.size(0), "], got ", lse.str());
  Tensor gl = grad_loss.dtype() == st ? grad_loss : cast_raw(grad_loss, st);
  Tensor d = Tensor::empty_like(logits);
  Tensor x = logits.detach();
  TANDEM_BACKEND(x, kernels::cross_entropy_shard_grad_cpu(x, targets, lse, gl, d),
                 kernels::cross_entropy_shard_grad_cuda(x, targets, lse, gl, d));
  return d;
}

}  // namespace tandem::ops
