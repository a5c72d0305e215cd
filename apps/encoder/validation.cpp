// apps/encoder/validation.cpp: the held-out pass (see validation.h).
#include "apps/encoder/validation.h"

#include <algorithm>
#include <vector>

#include "apps/encoder/setup.h"   // defines: Training, kValidationEpoch
#include "core/autograd.h"        // defines: NoGradGuard
#include "core/ops/loss/loss.h"        // defines: cross_entropy, topk_correct
#include "core/ops/finite/finite.h"      // defines: count_nonfinite
#include "dist/transport/bootstrap.h"  // defines: comm_for
#include "dist/transport/busy.h"       // defines: Busy (validation is announced host work)

namespace tandem::apps::encoder {

namespace {

// Sums over one batch's masked positions.
struct Sums {
  double loss = 0, correct = 0, masked = 0, nonfinite = 0;
};

void score(Training& t, const Tensor& ids, const Tensor& mask, const Tensor& types, const Tensor& labels, Sums& s) {
  const int64_t n = ids.size(0) * ids.size(1);
  std::vector<int64_t> lab = labels.to_vector_i64(), rows, kept;
  for (int64_t i = 0; i < n; ++i)
    if (lab[i] != data::kIgnoreIndex) rows.push_back(i), kept.push_back(lab[i]);
  const auto m = static_cast<int64_t>(rows.size());
  if (m == 0) return;  // the same on every rank of a TP group (the same batch): no gather skipped by one only
  // The masked rows' logits over the whole vocabulary (--tp: joined over the TP group), scored here.
  const Tensor picked = t.model->masked_logits(ids, mask, types, Tensor::from_vector_i64(rows, {m}, DType::I64, t.dev));
  Tensor target = Tensor::from_vector_i64(kept, {m}, DType::I64, t.dev);
  s.nonfinite += static_cast<double>(ops::count_nonfinite({picked}).to_vector_i64()[0]);
  s.loss += ops::cross_entropy(picked, target).item() * static_cast<double>(m);
  s.correct += static_cast<double>(ops::topk_correct(picked, target, 1));
  s.masked += static_cast<double>(m);
}

}  // namespace

EvalResult evaluate(Training& t, const EncoderOptions& o, int64_t step) {
  EvalResult r;
  r.step = step;
  if (!t.val) return r;
  // --zero 3: the whole weights for the pass (every rank): the model runs its typed forward here,
  // not through the Step's hooks, and the ranks score different numbers of tail sequences.
  const dist::FullParameters weights = t.step->full_parameters();
  t.model->train(false);
  autograd::NoGradGuard no_grad;
  Sums s;
  double sequences = 0;
  t.val->start_epoch(kValidationEpoch);
  data::TextBatch b;
  // Announced to dist's watchdog batch by batch: a rank whose shard takes longer keeps the ranks
  // already waiting in the all-reduce below waiting on (dist/transport/busy.h).
  dist::Busy validating("validating", {.unit = "batches"});
  for (int64_t k = 0; (o.val_batches < 0 || k < o.val_batches) && t.val->next(b); ++k) {
    sequences += static_cast<double>(b.input_ids.size(0));
    score(t, b.input_ids, b.attention_mask, b.token_type_ids, b.labels, s);
    validating.progress(static_cast<uint64_t>(k + 1));
  }
  // The unpadded sampler cuts the last N mod world sequences (data/sampler.h): rank k scores the
  // k-th of them, so a full validation reads every held-out sequence exactly once.
  const data::MlmDataset& ds = t.val->dataset();
  const int64_t tail = ds.size() - ds.size() % t.dp_size + t.dp_rank;  // --tp: a TP group scores one
  if (o.val_batches < 0 && tail < ds.size()) {
    const int64_t L = ds.seq_len();
    Tensor ids = Tensor::empty({1, L}, DType::I64), mask = Tensor::empty({1, L}, DType::I64);
    Tensor labels = Tensor::empty({1, L}, DType::I64);
    ds.get(tail, data::SampleKey{o.seed, kValidationEpoch}, ids.data<int64_t>(), mask.data<int64_t>(),
           labels.data<int64_t>());
    score(t, ids.to(t.dev), mask.to(t.dev), Tensor::zeros({1, L}, DType::I64, t.dev), labels, s);
    sequences += 1;
  }
  t.model->train(true);
  // --tp: every rank of a TP group scored the same sequences; its rank 0 counts them.
  if (t.tp_rank != 0) s = Sums{}, sequences = 0;
  Tensor sums = Tensor::from_vector_f64({s.loss, s.correct, s.masked, sequences, s.nonfinite}, {5}, DType::F64);
  dist::comm_for(Device::cpu()).all_reduce(sums, dist::ReduceOp::Sum, "validation")->wait();
  std::vector<double> v = sums.to_vector_f64();
  r.masked = static_cast<int64_t>(v[2]);
  r.sequences = static_cast<int64_t>(v[3]);
  r.nonfinite = static_cast<int64_t>(v[4]);
  r.loss = v[2] > 0 && !r.failed() ? v[0] / v[2] : 0;
  r.accuracy = v[2] > 0 && !r.failed() ? v[1] / v[2] : 0;
  return r;
}

}  // namespace tandem::apps::encoder
