// apps/train/validation.cpp: evaluate() and when train_imagenet runs it (see validation.h).
#include "apps/train/validation.h"

#include <algorithm>
#include <cstdio>

#include "apps/train/setup.h"  // defines: Training
#include "core/autograd.h"     // defines: NoGradGuard
#include "core/ops/loss.h"     // defines: cross_entropy, topk_correct
#include "dist/bootstrap.h"    // defines: comm_for (the CPU communicator for the counts)

namespace tandem::apps {

EvalResult evaluate(Module& model, data::Loader& loader, int num_classes) {
  model.eval();
  autograd::NoGradGuard no_grad;
  double c1 = 0, c5 = 0, loss = 0, n = 0;
  loader.start_epoch(0);
  data::Batch b;
  while (loader.next(b)) {
    Tensor logits = model(b.images);
    const int64_t rows = b.labels.numel();
    c1 += ops::topk_correct(logits, b.labels, 1);
    c5 += ops::topk_correct(logits, b.labels, std::min(5, num_classes));
    loss += ops::cross_entropy(logits, b.labels).item() * rows;
    n += rows;
  }
  model.train();
  Tensor sums = Tensor::from_vector({float(c1), float(c5), float(loss), float(n)}, {4});
  dist::comm_for(Device::cpu()).all_reduce(sums, dist::ReduceOp::Sum, "validation counts")->wait();
  std::vector<float> s = sums.to_vector();
  EvalResult r;
  r.samples = static_cast<int64_t>(s[3]);
  if (r.samples > 0) r.top1 = s[0] / s[3], r.top5 = s[1] / s[3], r.loss = s[2] / s[3];
  return r;
}

std::optional<EvalResult> validate_if_due(Training& t, const TrainOptions& o, int64_t epoch, bool last_step) {
  const bool due = (o.val_every > 0 && (epoch + 1) % o.val_every == 0) || last_step;
  if (!t.val || !due) return std::nullopt;
  const EvalResult r = evaluate(*t.model, *t.val, t.classes);
  if (t.world->rank == 0)
    std::printf("epoch %lld validation: top1 %.2f%% top5 %.2f%% loss %.4f (%lld images)\n", (long long)epoch,
                100 * r.top1, 100 * r.top5, r.loss, (long long)r.samples);
  return r;
}

}  // namespace tandem::apps
