// apps/encoder/setup.h: everything train_encoder builds before its first step.
//
// Order (fixed here, part of the run's determinism, as in apps/train/setup.h): the corpus is read
// and tokenized (every rank does it: it is a pure function of the files and the vocab, and cheaper
// than broadcasting), the unigram baseline is scored on the held-out set, the model is created
// (init drawn from --seed, skipped when a checkpoint will overwrite it), moved to the device, the
// default generator reseeded (dropout), cast to 16-bit under --amp (before the restore: an AMP
// checkpoint holds 16-bit weights; apps/train/amp.h), the checkpoint restored, and only then wrapped
// in DDP (reduce-scatter buckets under --zero 2), sharded (--zero 1|2, dist/zero.h) and handed to
// the optimizer (ParamGroups over the parameters, the f32 masters or the ZeRO shard) and the loaders.
// Last, the memory ledger is predicted (apps/train/ledger.h) and printed at start-up.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "apps/encoder/flops.h"         // defines: PeakFlops
#include "apps/encoder/options.h"       // defines: EncoderOptions
#include "apps/encoder/param_groups.h"  // defines: ParamGroups
#include "apps/train/amp.h"             // defines: AmpRun
#include "data/mlm_baseline.h"          // defines: UnigramBaseline
#include "data/text_loader.h"           // defines: TextLoader, MlmDataset
#include "dist/transport/bootstrap.h"   // defines: World
#include "dist/ddp.h"                   // defines: DistributedDataParallel
#include "dist/measure/memory_ledger.h"  // defines: MemoryLedger
#include "dist/zero.h"                  // defines: Zero
#include "layers/checkpoint.h"          // defines: TrainState
#include "layers/models/bert.h"         // defines: BertForMaskedLM
#include "optim/lr_schedule.h"          // defines: LrScheduleOptions

namespace tandem::apps::encoder {

// The masking key of every validation: the held-out set is scored with one fixed set of masks, so
// validations during and across runs (and the baseline) see the same positions.
constexpr int64_t kValidationEpoch = 0;

struct Corpus {
  std::shared_ptr<const data::MlmDataset> train, held_out;  // held_out may be null (no validation)
  int64_t vocab_size = 0;
  int64_t files = 0, bytes = 0, train_documents = 0, held_out_documents = 0;
  data::UnigramBaseline baseline;  // on held_out with kValidationEpoch's masks (zeros without held-out)
  double tokenize_s = 0;
};

// --synthetic: random ids; else reads --data with --vocab (data/text_corpus.h).
Corpus make_corpus(const EncoderOptions& o);

struct Training {
  const dist::World* world = nullptr;
  Device dev;
  Corpus corpus;
  std::string resumed_from;  // the checkpoint this run continues ("" for a fresh start)
  TrainState start;          // where this run begins (all zeros for a fresh start)
  std::shared_ptr<models::BertForMaskedLM> model;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<dist::Zero> zero;  // --zero 1|2 (null: plain DDP); opt then holds this rank's shard
  std::unique_ptr<AmpRun> amp;       // --amp bf16|fp16 (null: f32); opt then updates the f32 masters
  std::unique_ptr<ParamGroups> opt;
  std::unique_ptr<data::TextLoader> train, val;  // val null without a held-out set
  optim::LrScheduleOptions sched;
  int64_t global_batch = 0;  // sequences: --batch x ranks
  int64_t end_step = 0;      // this invocation stops here (--steps, or earlier with --run-steps)
  int64_t bench_warmup = 0;  // steps left out of the steady rates
  double flops_per_token = 0;
  PeakFlops peak;            // per rank
  dist::MemoryLedger ledger; // predicted at set-up, measured after the first step and at the end
  int64_t mem_other = 0;     // allocator bytes at set-up that are not model state (corpus, loaders)
};

// Before MPI is up, the launcher's environment says which rank we are (MPICH: PMI_RANK).
bool env_rank0();
// Starts MPI (and NCCL on GPUs) and checks that --device can be honoured.
const dist::World& init_world(const EncoderOptions& o);
// The model --model names for `vocab` tokens; init skipped when `resume` is non-empty.
std::shared_ptr<models::BertForMaskedLM> make_model(const EncoderOptions& o, int64_t vocab, const std::string& resume);
// Restores `resume` (when non-empty), then builds DDP, the optimizer, loaders and the schedule.
Training set_up(const EncoderOptions& o, const dist::World& w, Corpus corpus,
                std::shared_ptr<models::BertForMaskedLM> model, const std::string& resume);

}  // namespace tandem::apps::encoder
