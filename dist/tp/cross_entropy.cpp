// dist/tp/cross_entropy.cpp: the statistics, their all_gather and the backward node (see cross_entropy.h).
#include "dist/tp/cross_entropy.h"

#include <vector>

#include "core/autograd.h"
#include "core/ops/elementwise/elementwise.h"
#include "core/ops/embedding/embedding.h"
#include "core/ops/loss/loss.h"
#include "core/ops/reduce/reduce.h"

namespace tandem::dist::tp {
namespace {

// Every row kept; targets = label - start in this shard's range, -1 elsewhere.
Tensor sharded_loss(const Tensor& logits, const Tensor& targets, Communicator& comm) {
  const int64_t n = logits.size(0);
  Tensor stats = ops::cross_entropy_shard_stats(logits, targets);  // [3, N]
  Tensor gathered = Tensor::empty({comm.size() * 3 * n}, stats.dtype(), stats.device());
  comm.all_gather(stats.view({3 * n}), gathered, "tp cross_entropy stats")->wait();
  auto [lse, loss] = ops::cross_entropy_shard_combine(gathered.view({comm.size(), 3, n}));
  autograd::record("VocabParallelCrossEntropyBackward", {logits}, loss,
                   [x = logits.detach(), targets, lse](std::vector<Tensor>& g) {
                     return std::vector<Tensor>{ops::cross_entropy_shard_grad(x, targets, lse, g[0])};
                   });
  return loss;
}

}  // namespace

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t vocab_start, int64_t vocab,
                                    Communicator& comm, int64_t ignore_index) {
  TANDEM_CHECK(logits.dim() == 2 && logits.size(0) > 0, "vocab_parallel_cross_entropy: logits must be [N, Vr], got ",
               logits.str());
  TANDEM_CHECK(labels.numel() == logits.size(0), "vocab_parallel_cross_entropy: ", labels.numel(),
               " labels for ", logits.size(0), " rows of logits");
  TANDEM_CHECK(vocab_start >= 0 && vocab_start + logits.size(1) <= vocab, "vocab_parallel_cross_entropy: the shard's "
               "columns [", vocab_start, ", ", vocab_start + logits.size(1), ") are not inside the vocabulary [0, ",
               vocab, ")");
  const std::vector<int64_t> v = labels.to_vector_i64();  // one host copy; the same labels on every rank
  std::vector<int64_t> rows, targets;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == ignore_index) continue;
    TANDEM_CHECK(v[i] >= 0 && v[i] < vocab, "vocab_parallel_cross_entropy: label ", v[i], " at row ", i,
                 " is outside [0, ", vocab, ") and is not ignore_index (", ignore_index, ")");
    rows.push_back(static_cast<int64_t>(i));
    const int64_t local = v[i] - vocab_start;
    targets.push_back(local >= 0 && local < logits.size(1) ? local : -1);
  }
  // The kept rows are the same on every rank, so either every rank runs the collective or none does.
  if (rows.empty()) return ops::scale(ops::sum(logits), 0.0f);  // 0, still connected to the graph
  const auto n = static_cast<int64_t>(rows.size());
  Tensor t = Tensor::from_vector_i64(targets, {n}, DType::I64, logits.device());
  if (n == logits.size(0)) return sharded_loss(logits, t, comm);
  Tensor idx = Tensor::from_vector_i64(rows, {n}, DType::I64, logits.device());
  return sharded_loss(ops::embedding(idx, logits), t, comm);  // the kept rows (a differentiable row lookup)
}

}  // namespace tandem::dist::tp
