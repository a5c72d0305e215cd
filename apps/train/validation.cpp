// apps/train/validation.cpp: evaluate() and when train_imagenet runs it (see validation.h).
#include "apps/train/validation.h"

#include <algorithm>
#include <cstdio>

#include "apps/train/setup.h"  // defines: Training, make_eval_datasets, make_model
#include "apps/trainer/step/nonfinite.h"  // defines: RunStopped
#include "apps/trainer/run/exit_status.h"  // defines: InputError, as_input_error
#include "apps/trainer/run/run_folder.h"  // defines: UsageError
#include "core/autograd.h"     // defines: NoGradGuard
#include "core/ops/copy/copy.h"      // defines: cast_raw (--amp inputs)
#include "core/ops/finite/finite.h"   // defines: count_nonfinite
#include "core/ops/loss/loss.h"     // defines: cross_entropy, topk_correct
#include "dist/transport/bootstrap.h"  // defines: comm_for (the CPU communicator for the counts)
#include "dist/transport/busy.h"       // defines: Busy (validation is announced host work)
#include "apps/trainer/step/ema.h"            // defines: ModelEma (--model-ema)
#include "apps/trainer/run/start_weights.h"  // defines: load_start_weights
#include "core/safetensors.h"            // defines: read_metadata
#include "core/torch_save.h"            // defines: is_torch_zip (a .pth is a state dict)
#include "checkpoint/checkpoint.h" // defines: read_checkpoint, read_train_state, is_checkpoint_format

namespace tandem::apps {

std::string EvalResult::str() const {
  char b[160];
  if (failed())
    std::snprintf(b, sizeof b, "FAILED: %lld non-finite logits (NaN/inf) in %lld images, so no accuracy",
                  (long long)nonfinite, (long long)samples);
  else
    std::snprintf(b, sizeof b, "top1 %.2f%% top5 %.2f%% loss %.4f (%lld images)", 100 * top1, 100 * top5, loss,
                  (long long)samples);
  return b;
}

EvalResult evaluate(Module& model, data::Loader& loader, int num_classes, DType input) {
  model.eval();
  autograd::NoGradGuard no_grad;
  double c1 = 0, c5 = 0, loss = 0, n = 0, bad = 0;
  loader.start_epoch(0);
  data::Batch b;
  {
    // Announced to dist's watchdog batch by batch: a rank whose shard takes longer keeps the ranks
    // already waiting in the all-reduce below waiting on (dist/transport/busy.h).
    dist::Busy validating("validating", {.unit = "batches"});
    for (uint64_t batches = 1; loader.next(b); validating.progress(batches++)) {
      Tensor logits = model(input == b.images.dtype() ? b.images : ops::cast_raw(b.images, input));
      const int64_t rows = b.labels.numel();
      bad += static_cast<double>(ops::count_nonfinite({logits}).to_vector_i64()[0]);
      c1 += ops::topk_correct(logits, b.labels, 1);
      c5 += ops::topk_correct(logits, b.labels, std::min(5, num_classes));
      loss += ops::cross_entropy(logits, b.labels).item() * rows;
      n += rows;
    }
  }
  model.train();
  Tensor sums = Tensor::from_vector({float(c1), float(c5), float(loss), float(n), float(bad)}, {5});
  dist::comm_for(Device::cpu()).all_reduce(sums, dist::ReduceOp::Sum, "validation counts")->wait();
  std::vector<float> s = sums.to_vector();
  EvalResult r;
  r.samples = static_cast<int64_t>(s[3]);
  r.nonfinite = static_cast<int64_t>(s[4]);
  if (r.samples > 0 && !r.failed()) r.top1 = s[0] / s[3], r.top5 = s[1] / s[3], r.loss = s[2] / s[3];
  return r;
}

std::optional<EvalResult> validate_if_due(Training& t, const TrainOptions& o, int64_t epoch, bool last_step) {
  const bool due = (o.val_every > 0 && (epoch + 1) % o.val_every == 0) || last_step;
  if (!t.val || !due) return std::nullopt;
  // --zero 3: the whole weights for the pass (every rank), not a gathered unit per batch - the
  // ranks' validation batch counts may differ, and gathers are collectives.
  const dist::FullParameters weights = t.step->full_parameters();
  const EvalResult r = evaluate(*t.model, *t.val, t.classes, t.step->compute_dtype());
  if (t.world->rank == 0) std::printf("epoch %lld validation: %s\n", (long long)epoch + 1, r.str().c_str());
  if (t.ema) {
    // The EMA's weights in the model for one pass, the trained ones back after it (apps/trainer/step/ema.h).
    const trainer::ModelEma::Applied ema(*t.ema);
    const EvalResult e = evaluate(*t.model, *t.val, t.classes, t.step->compute_dtype());
    if (t.world->rank == 0) std::printf("epoch %lld validation (ema): %s\n", (long long)epoch + 1, e.str().c_str());
  }
  return r;
}

namespace {

// The checkpoint's extra.<key> as an int (-1 when absent).
int64_t extra_int(const TrainState& s, const std::string& key) {
  auto it = s.extra.find(key);
  return it == s.extra.end() ? -1 : std::stoll(it->second);
}

// --evaluate of a checkpoint: the model, image size and class count come from its metadata; a flag
// given explicitly must agree with it (a UsageError naming both values otherwise).
void take_from_checkpoint(TrainOptions& o, const TrainState& head, const std::string& path) {
  auto refuse = [&](const std::string& flag, const std::string& given, const std::string& saved) {
    throw trainer::UsageError("--evaluate: " + flag + " " + given + " contradicts checkpoint '" + path +
                              "', which holds " + flag + " " + saved + ": drop " + flag +
                              " (--evaluate takes it from the checkpoint) or evaluate another file");
  };
  if (!head.model.empty()) {
    if (o.model_set && o.model != head.model) refuse("--model", o.model, head.model);
    o.model = head.model;
  }
  if (const int64_t size = extra_int(head, "image_size"); size > 0) {
    if (o.image_size_set && o.image_size != size) refuse("--image-size", std::to_string(o.image_size), std::to_string(size));
    o.image_size = static_cast<int>(size);
  }
  // The class count: --data's val/ is labelled with the checkpoint's list (make_eval_datasets);
  // --synthetic has no list, so the saved count builds the head.
  if (const int64_t n = extra_int(head, "num_classes"); n > 0 && o.synthetic) {
    if (o.num_classes_set && o.num_classes != n) refuse("--num-classes", std::to_string(o.num_classes), std::to_string(n));
    o.num_classes = static_cast<int>(n);
  }
}

}  // namespace

EvalResult evaluate_checkpoint(const TrainOptions& flags, const dist::World& w, const std::string& resume) {
  // --weights FILE or the --resume checkpoint (validate() allows one of them).
  const std::string path = flags.weights.empty() ? resume : flags.weights;
  if (path.empty())
    throw trainer::UsageError("--evaluate: no checkpoint in " + flags.checkpoint_dir + " (--resume auto found none)");
  // A torch.save file (.pth) is a state dict, never a checkpoint: no safetensors header to read.
  const safetensors::Metadata meta = torch_save::is_torch_zip(path) ? safetensors::Metadata{}
                                                                    : safetensors::read_metadata(path);
  const auto format = meta.find("format");
  const bool checkpoint = format != meta.end() && is_checkpoint_format(format->second);
  TrainOptions o = flags;
  TrainState head;
  if (checkpoint) {
    // The checkpoint's class list labels val/, so a val/ that lacks a class scores the same checkpoint
    // the same way; a file without a list (format 1, --synthetic) uses train/'s folders as before.
    head = read_train_state(path);
    // The whole file first: a damaged one (a digest that does not match, a truncated copy) is a data
    // error (exit 65), told apart from a model that does not fit it.
    if (const std::string damage = checkpoint_damage(path); !damage.empty()) throw trainer::InputError(damage);
    take_from_checkpoint(o, head, path);
  }
  const Datasets ds = make_eval_datasets(o, head.classes);
  if (!ds.val)
    throw trainer::UsageError("--evaluate needs a validation set: " +
                              (o.synthetic ? std::string("set --synthetic-val-size above 0")
                                           : "put one in " + o.data + "/val/<class>/"));
  ModulePtr model = make_model(o, ds.val->num_classes(), path);
  model->to(w.device);
  // One loader for both: a plain state dict (torchvision's names) or a checkpoint's model tensors,
  // strict, --weights-skip honoured (checkpoint/weights.h).
  trainer::load_start_weights(path, *model, o.weights_skip, {}, false);
  std::unique_ptr<data::Loader> val = make_val_loader(o, w, ds.val);
  const EvalResult r = evaluate(*model, *val, ds.val->num_classes());
  const std::string what = checkpoint ? " (step " + std::to_string(head.step) + ")" : " (weights)";
  if (w.rank == 0)
    std::printf("evaluate: %s at %d px (%s)\nevaluate: %s%s: val %s\n", o.model.c_str(), o.image_size,
                checkpoint ? "from the checkpoint" : "--model and --image-size", path.c_str(), what.c_str(),
                r.str().c_str());
  if (r.failed()) throw trainer::RunStopped("--evaluate: non-finite logits");
  if (checkpoint) {
    // A checkpoint of a --model-ema run: its average too (apps/trainer/step/ema.h).
    NamedTensors entries = read_checkpoint(path).optimizer;
    const NamedTensors ema_state = trainer::ModelEma::take_state(entries);
    if (!ema_state.empty()) {
      trainer::ModelEma ema(*model, 0.5);  // the decay is not used: only the loaded average is evaluated
      ema.load_state(ema_state, "checkpoint '" + path + "'");
      const trainer::ModelEma::Applied applied(ema);
      const EvalResult e = evaluate(*model, *val, ds.val->num_classes());
      if (w.rank == 0) std::printf("evaluate (ema): %s: val %s\n", path.c_str(), e.str().c_str());
    }
  }
  return r;
}

}  // namespace tandem::apps
