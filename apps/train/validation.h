// apps/train/validation.h: top-1/top-5 accuracy and loss on the validation set, across ranks.
//
// Every rank runs its shard of the validation loader (file order, no padding, so each sample is
// seen exactly once), then the *counts* are reduced, not per-rank accuracies, so uneven shards
// still give the exact global accuracy. Counts travel as f32, exact below 2^24 = 16.7 M samples.
// Non-finite logits are counted too (ops::count_nonfinite): a validation that met any reports a
// failure naming the count, never an accuracy (NaN logits would otherwise score by argmax's rule).
#pragma once
#include <cstdint>
#include <optional>

#include <string>

#include "apps/train/options.h"  // defines: TrainOptions
#include "data/loader.h"         // defines: Loader
#include "dist/transport/bootstrap.h"  // defines: World
#include "layers/module.h"       // defines: Module, ModulePtr

namespace tandem::apps {

struct Training;
struct Datasets;

struct EvalResult {
  double top1 = 0, top5 = 0, loss = 0;  // fractions of the samples, mean cross-entropy (0 when failed)
  int64_t samples = 0;                  // validation images seen, over all ranks
  int64_t nonfinite = 0;                // non-finite logits over all ranks: > 0 means the pass failed
  bool failed() const { return nonfinite > 0; }
  // "top1 45.60% top5 97.20% loss 1.2966 (500 images)", or the failure in words.
  std::string str() const;
};

// Runs the whole validation loader on every rank and reduces the counts. Collective.
// `input`: the dtype the model computes in (its first layer's; --amp: f16/bf16), images are cast to it.
EvalResult evaluate(Module& model, data::Loader& loader, int num_classes, DType input = DType::F32);

// Validates after `epoch` when due (every --val-every epochs, and after the invocation's last
// epoch) and prints the result on rank 0. Nothing when there is no validation set. Collective.
std::optional<EvalResult> validate_if_due(Training& t, const TrainOptions& o, int64_t epoch, bool last_step);

// train_imagenet --evaluate: validates the model weights of training checkpoint `path` (--resume)
// or of --weights FILE (a plain state dict with torchvision's names, or a checkpoint), and prints
// "evaluate: ..." on rank 0 (and "evaluate (ema): ..." for a checkpoint holding --model-ema's
// average). A checkpoint's metadata sets the model, the image size, the class list that labels
// val/ and (--synthetic) the class count; a flag given explicitly that contradicts it is a
// UsageError naming both values. A plain state dict has no metadata: the flags as given, val/
// labelled with train/'s folders. Collective. Fails clearly when there is no file or validation
// set or the weights do not fit the model; throws trainer::RunStopped (exit 3) when the logits
// were not finite.
EvalResult evaluate_checkpoint(const TrainOptions& o, const dist::World& w, const std::string& path);

}  // namespace tandem::apps
