// apps/encoder/validation.cpp: the held-out pass (see validation.h).
#include "apps/encoder/validation.h"

#include <vector>

#include "apps/encoder/setup.h"   // defines: Training, kValidationEpoch
#include "core/autograd.h"        // defines: NoGradGuard
#include "core/ops/loss.h"        // defines: cross_entropy, topk_correct
#include "core/ops/embedding.h"   // defines: embedding (the row gather)
#include "core/ops/shape.h"       // defines: reshape
#include "dist/bootstrap.h"       // defines: comm_for

namespace tandem::apps::encoder {

EvalResult evaluate(Training& t, const EncoderOptions& o, int64_t step) {
  EvalResult r;
  r.step = step;
  if (!t.val) return r;
  t.model->train(false);
  autograd::NoGradGuard no_grad;
  double loss_sum = 0, correct = 0, masked = 0, sequences = 0;
  t.val->start_epoch(kValidationEpoch);
  data::TextBatch b;
  for (int64_t k = 0; (o.val_batches < 0 || k < o.val_batches) && t.val->next(b); ++k) {
    sequences += static_cast<double>(b.input_ids.size(0));
    if (b.masked == 0) continue;
    Tensor logits = t.model->forward(b.input_ids, b.attention_mask, b.token_type_ids);
    const int64_t n = logits.size(0) * logits.size(1), v = logits.size(2);
    std::vector<int64_t> lab = b.labels.to_vector_i64(), rows, kept;
    for (int64_t i = 0; i < n; ++i)
      if (lab[i] != data::kIgnoreIndex) rows.push_back(i), kept.push_back(lab[i]);
    const auto m = static_cast<int64_t>(rows.size());
    // Gather the masked rows of the [n, V] logits (embedding lookup = row gather), then score them.
    Tensor picked = ops::embedding(Tensor::from_vector_i64(rows, {m}, DType::I64, t.dev), ops::reshape(logits, {n, v}));
    Tensor labels = Tensor::from_vector_i64(kept, {m}, DType::I64, t.dev);
    loss_sum += ops::cross_entropy(picked, labels).item() * static_cast<double>(m);
    correct += static_cast<double>(ops::topk_correct(picked, labels, 1));
    masked += static_cast<double>(m);
  }
  t.model->train(true);
  Tensor sums = Tensor::from_vector_f64({loss_sum, correct, masked, sequences}, {4}, DType::F64);
  dist::comm_for(Device::cpu()).all_reduce(sums, dist::ReduceOp::Sum, "validation")->wait();
  std::vector<double> s = sums.to_vector_f64();
  r.masked = static_cast<int64_t>(s[2]);
  r.sequences = static_cast<int64_t>(s[3]);
  r.loss = s[2] > 0 ? s[0] / s[2] : 0;
  r.accuracy = s[2] > 0 ? s[1] / s[2] : 0;
  return r;
}

}  // namespace tandem::apps::encoder
