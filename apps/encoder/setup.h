// apps/encoder/setup.h: everything train_encoder builds before its first step.
//
// Order (fixed here, part of the run's determinism, as in train_imagenet's set-up): the corpus is read
// and tokenized (every rank does it: it is a pure function of the files and the vocab, and cheaper
// than broadcasting), the unigram baseline is scored on the held-out set, the model is created
// (init drawn from --seed, skipped when a checkpoint will overwrite it), moved to the device, the
// default generator reseeded (dropout), and the training step built around it (apps/trainer/
// step.h), which keeps its own fixed order: the cast to 16-bit under --amp (before the restore: an
// AMP checkpoint holds 16-bit weights), the checkpoint restored (the Step calls back into
// restore_checkpoint), DDP (reduce-scatter buckets under --zero 2), ZeRO (--zero 1|2, dist/zero.h),
// the f32 masters, the optimizer (BERT's two parameter groups over the parameters, the masters or
// the ZeRO shard) and the checkpoint's optimizer state. Then the loaders, the run's length in
// samples (apps/trainer/run/position.h: --steps counts steps of the fresh start's global batch, so a
// resume on another world size or --batch ends, and decays the LR, where the uninterrupted run
// would), and last the memory ledger is predicted (apps/trainer/run/memory.h) and printed at start-up;
// --memory-budget-mib then refuses (exit 2, every rank) a run whose prediction exceeds it, before
// the first step allocates the optimizer state, naming the --zero stages and --tp sizes that fit.
// The checkpoint folder is opened before the corpus is read (train_encoder.cpp).
//
// The model is one field whatever the layout: a models::MaskedLM (layers/models/masked_lm.h), whole
// (BertForMaskedLM) or, under --tp T > 1 (Megatron-style tensor parallelism, dist/tp/), this rank's
// shards (TpBertForMaskedLM). Only its construction differs: set_up refuses (exit 2, every rank) a
// T that does not divide the world size or the model's heads, hidden size or FFN width
// (trainer::tp_refusal), builds the grid (dist/tp/grid.h: TP groups of T adjacent ranks, DP across
// them), the model over the TP group and the Step over the DP group with the TP group and layout
// (apps/trainer/step/step.h). The loaders' rank and world are the DP ones: every rank of a TP group
// reads the same batch (the same ids, masks and labels: a TP group computes one model), the DP
// groups different ones, and the global batch is --batch x world / T. Every rank of a TP group
// computes the same loss, so the trainer's means over the world are unchanged; validation's logits
// come whole from the model and only TP rank 0 adds its sums. Checkpoints stay canonical
// (checkpointing.h): the model and the Step each map their own tensors.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "apps/encoder/flops.h"    // defines: PeakFlops
#include "apps/encoder/options.h"  // defines: EncoderOptions
#include "apps/trainer/step/ema.h"      // defines: ModelEma
#include "apps/trainer/run/memory.h"   // defines: MemoryMeter
#include "apps/trainer/run/position.h"    // defines: Position, RunLength
#include "apps/trainer/run/run_folder.h"  // defines: RunFolder
#include "apps/trainer/step/step.h"     // defines: Step
#include "data/mlm_baseline.h"     // defines: UnigramBaseline
#include "data/text_loader.h"      // defines: TextLoader, MlmDataset
#include "dist/tp/grid.h"          // defines: Grid
#include "dist/transport/bootstrap.h"        // defines: World
#include "checkpoint/checkpoint.h"     // defines: TrainState
#include "layers/models/bert.h"    // defines: BertForMaskedLM
#include "layers/models/masked_lm.h"  // defines: MaskedLM
#include "apps/trainer/run/run_log.h"  // defines: RunLog
#include "optim/lr_schedule.h"     // defines: LrScheduleOptions

namespace tandem::apps::encoder {

// The masking key of every validation: the held-out set is scored with one fixed set of masks, so
// validations during and across runs (and the baseline) see the same positions.
constexpr int64_t kValidationEpoch = 0;

struct Corpus {
  std::shared_ptr<const data::MlmDataset> train, held_out;  // held_out may be null (no validation)
  int64_t vocab_size = 0;
  int64_t files = 0, bytes = 0, train_documents = 0, held_out_documents = 0;
  data::UnigramBaseline baseline;  // on held_out with kValidationEpoch's masks (zeros without held-out)
  std::string baseline_text;       // the baseline token as text ('the'), or "id N" (--synthetic has no vocab)
  double tokenize_s = 0;
};

// --synthetic: random ids; else reads --data with --vocab (data/text_corpus.h).
Corpus make_corpus(const EncoderOptions& o);

struct Training {
  const dist::World* world = nullptr;
  // --tp > 1: the TP x DP grid (declared before the model and the step, which use its groups, so it
  // is destroyed after them); null without TP. The data-parallel rank and size: the world's without TP.
  std::unique_ptr<dist::tp::Grid> grid;
  int dp_rank = 0, dp_size = 1, tp_rank = 0;
  Device dev;
  Corpus corpus;
  trainer::RunFolder folder; // --checkpoint-dir, owned by this run (rank 0 writes through it)
  std::string resumed_from;  // the checkpoint this run continues ("" for a fresh start)
  TrainState start;          // the checkpoint's state (all zeros for a fresh start)
  trainer::Position start_at;  // where this invocation begins
  std::shared_ptr<models::MaskedLM> model;  // whole, or (--tp > 1) this rank's shards
  BertConfig config;          // the canonical model's
  int64_t parameters = 0;     // the canonical model's (the tied decoder counted once)
  // DDP or ZeRO, --amp, BERT's AdamW/LAMB groups, clipping (apps/trainer/step/step.h), from the flags'
  // StepOptions, built once at the start of set_up (step_options(o)).
  trainer::StepOptions step_opts;
  std::unique_ptr<trainer::Step> step;
  std::unique_ptr<data::TextLoader> train, val;  // val null without a held-out set
  optim::LrScheduleOptions sched;
  int64_t global_batch = 0;  // sequences: --batch x data-parallel ranks
  int64_t fresh_global_batch = 0;  // the fresh start's: the schedule's unit (position.h)
  trainer::RunLength length; // --steps in samples; where the schedule stands
  int64_t total_steps = 0;   // where the step count ends: start_at.step + the steps left at this batch
  int64_t end_step = 0;      // this invocation stops here (total_steps, or earlier with --run-steps)
  int64_t bench_warmup = 0;  // steps left out of the steady rates
  double flops_per_token = 0;
  PeakFlops peak;            // per rank
  trainer::MemoryMeter memory;  // predicted at set-up, measured after the first step and at the end
  trainer::RunLog log;          // --log-file (rank 0; disabled elsewhere and without one): report.h start_records
  // --model-ema: the average of the weights (apps/trainer/step/ema.h); null without it.
  std::unique_ptr<trainer::ModelEma> ema;
};

// Starts MPI (and NCCL on GPUs) and checks that --device can be honoured.
const dist::World& init_world(const EncoderOptions& o);
// The (whole) model --model names for `vocab` tokens; init skipped when `resume` is non-empty.
std::shared_ptr<models::BertForMaskedLM> make_model(const EncoderOptions& o, int64_t vocab, const std::string& resume);
// A checkpoint's state and optimizer entries, after its weights went into the model.
struct Restored {
  TrainState state;
  NamedTensors optimizer;
};
// How set_up restores folder.resume_path() into t.model: checkpointing.h's restore_checkpoint,
// handed in by train_encoder.cpp (the checkpoint code depends on Training, so set-up does not
// include it).
using RestoreCheckpoint = std::function<Restored(const std::string& path, const EncoderOptions& o, const Training& t)>;

// Builds the model (whole, or under --tp > 1 the grid and this rank's shards; init skipped when a
// checkpoint will overwrite it) and the step around it (restoring folder.resume_path() into it
// through `restore` when non-empty), then the loaders, the run's length and schedule and the memory
// ledger.
Training set_up(const EncoderOptions& o, const dist::World& w, Corpus corpus, trainer::RunFolder folder,
                const RestoreCheckpoint& restore_checkpoint);

}  // namespace tandem::apps::encoder
