// apps/train/validation.cpp: evaluate() and when train_imagenet runs it (see validation.h).
#include "apps/train/validation.h"

#include <algorithm>
#include <cstdio>

#include "apps/train/setup.h"  // defines: Training
#include "core/autograd.h"     // defines: NoGradGuard
#include "core/ops/copy/copy.h"      // defines: cast_raw (--amp inputs)
#include "core/ops/loss/loss.h"     // defines: cross_entropy, topk_correct
#include "dist/transport/bootstrap.h"  // defines: comm_for (the CPU communicator for the counts)
#include "dist/transport/busy.h"       // defines: Busy (validation is announced host work)
#include "layers/checkpoint.h" // defines: load_checkpoint

namespace tandem::apps {

EvalResult evaluate(Module& model, data::Loader& loader, int num_classes, DType input) {
  model.eval();
  autograd::NoGradGuard no_grad;
  double c1 = 0, c5 = 0, loss = 0, n = 0;
  loader.start_epoch(0);
  data::Batch b;
  {
    // Announced to dist's watchdog batch by batch: a rank whose shard takes longer keeps the ranks
    // already waiting in the all-reduce below waiting on (dist/transport/busy.h).
    dist::Busy validating("validating", {.unit = "batches"});
    for (uint64_t batches = 1; loader.next(b); validating.progress(batches++)) {
      Tensor logits = model(input == b.images.dtype() ? b.images : ops::cast_raw(b.images, input));
      const int64_t rows = b.labels.numel();
      c1 += ops::topk_correct(logits, b.labels, 1);
      c5 += ops::topk_correct(logits, b.labels, std::min(5, num_classes));
      loss += ops::cross_entropy(logits, b.labels).item() * rows;
      n += rows;
    }
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
  // --zero 3: the whole weights for the pass (every rank), not a gathered unit per batch - the
  // ranks' validation batch counts may differ, and gathers are collectives.
  const dist::FullParameters weights = t.step->full_parameters();
  const EvalResult r = evaluate(*t.model, *t.val, t.classes, t.step->compute_dtype());
  if (t.world->rank == 0)
    std::printf("epoch %lld validation: top1 %.2f%% top5 %.2f%% loss %.4f (%lld images)\n", (long long)epoch,
                100 * r.top1, 100 * r.top5, r.loss, (long long)r.samples);
  return r;
}

EvalResult evaluate_checkpoint(const TrainOptions& o, const dist::World& w, const Datasets& ds, Module& model,
                               const std::string& path) {
  TANDEM_CHECK(!path.empty(), "--evaluate: no checkpoint in ", o.checkpoint_dir, " (--resume auto found none)");
  TANDEM_CHECK(ds.val != nullptr, "--evaluate needs a validation set: ",
               o.synthetic ? "set --synthetic-val-size above 0" : "put one in " + o.data + "/val/<class>/");
  model.to(w.device);
  const Checkpoint ck = load_checkpoint(path, model);
  TANDEM_CHECK(ck.state.model == o.model, "checkpoint '", path, "' holds a ", ck.state.model, " but --model is ",
               o.model, ": pass --model ", ck.state.model);
  std::unique_ptr<data::Loader> val = make_val_loader(o, w, ds.val);
  const EvalResult r = evaluate(model, *val, ds.val->num_classes());
  if (w.rank == 0)
    std::printf("evaluate: %s (step %lld): val top1 %.2f%% top5 %.2f%% loss %.4f (%lld images)\n", path.c_str(),
                (long long)ck.state.step, 100 * r.top1, 100 * r.top5, r.loss, (long long)r.samples);
  return r;
}

}  // namespace tandem::apps
