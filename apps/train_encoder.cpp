// apps/train_encoder: data-parallel BERT masked-language-model training, launched with mpiexec.
//
//   make_vocab /usr/share/games/fortunes --out vocab.txt --size 8000
//   mpiexec -n 2 train_encoder --data /usr/share/games/fortunes --vocab vocab.txt --model bert_mini
//   mpiexec -n 8 train_encoder --synthetic --model bert_base --steps 200 --metrics run.json
//
//   mpiexec -n 4 train_encoder --synthetic --model bert_large --amp bf16 --steps 100   (or --zero 2)
//
// One process per rank (GPU local_rank % device_count, or the CPU). The corpus is tokenized with
// WordPiece, packed into --seq-len sequences and masked as BERT does (data/text_dataset.h); every
// 20th document is held out. Each step: forward through DDP computing the masked-LM loss, backward
// (gradients all-reduced in buckets while backward runs), clipping, AdamW or LAMB with BERT's
// warmup + linear decay. Validation reports masked-token accuracy and loss on the held-out text
// beside the unigram baseline (always guessing the most frequent token). Checkpoints carry Hugging
// Face's BertForMaskedLM names and go into a --checkpoint-dir owned by one run (locked against a
// second job; apps/trainer/run/run_folder.h, opened before the corpus is read); --resume auto continues
// exactly on the same world size and batch (same batches, masks, LR), and on any other from the same
// sequence of the epoch's order with the LR schedule continued in samples (apps/trainer/run/position.h).
// A NaN/inf loss or gradient stops every rank (--on-nonfinite stop, the default; exit 3) or skips the
// step; non-finite weights always stop, and no checkpoint is written from them. Exit statuses: the
// table in apps/trainer/run/exit_status.h (0 done, 1 failed, 2 usage, 3 non-finite, 65 data, 75 preempted).
// --amp bf16|fp16: the model in 16-bit as core/autocast.h says (LayerNorm statistics, softmax, the
// loss and the embedding gradients' sums in f32), f32 master weights and optimizer state, fp16 loss
// scaling; steps with non-finite gradients are skipped on every rank and counted (apps/trainer/step/amp.h).
// --zero 1|2|3: the optimizer state (1), the gradients (2) and the parameters (3: each BertLayer
// gathered around its forward and backward, dist/zero3.h) sharded across ranks (dist/zero.h), with
// BERT's weight-decay groups applied per shard segment by parameter name. Either way checkpoints
// stay canonical (unsharded, name-keyed optimizer state; f32 masters), so a run resumes at another
// world size or stage. Together, each rank keeps the f32 masters of its shard only (apps/trainer/step/amp.h).
// The step itself - DDP or ZeRO, AMP, the parameter groups, clipping - is the training-step library's
// (apps/trainer/step/step.h), shared with train_imagenet; this program keeps the options, data, model and report.
// --tp T: Megatron-style tensor parallelism over groups of T ranks (dist/tp/bert.h), data parallel
// (DDP or --zero 1|2) over world / T, every rank of a TP group on the same batch; checkpoints stay
// canonical (assembled over TP at a save, sharded at a resume). --memory-budget-mib M refuses at
// start-up (exit 2) a run whose memory ledger predicts more than M MiB per rank, naming what fits.
// --strategy ps [--ps-servers K]: the parameter server (dist/extras/parameter_server.h) instead of
// DDP's all-reduce, BERT's no-decay group on the servers - SGD in f32 only, without clipping or
// checkpoints, so BERT's AdamW and clipping are refused there: --optimizer sgd --clip-grad-norm 0.
// Progress lines: sequences/s and tokens/s, MFU, the ms/step split, memory, the loss scale and skipped
// steps (apps/encoder/report.h); the start-up lines print the memory ledger.
// Preemption (apps/trainer/run/preemption.h): SIGTERM, SIGUSR1 or SIGINT makes every rank stop at the next
// step boundary, write a checkpoint there and exit with status 75; --checkpoint-interval MIN adds
// checkpoints by wall time. Checkpoint writes, validation and the corpus set-up are announced to
// dist's watchdog (dist/transport/busy.h), so a slow disk never ends a healthy job.
//
// Flags: one vocabulary with train_imagenet, --config FILE / --dump-config, a suggestion for a
// mistyped flag (apps/trainer/run/cli.h); --log-file writes JSON lines for apps/scripts/plot_run.py and
// progress lines end with the elapsed time and an ETA (apps/trainer/run/run_log.h).
// --weights FILE starts from a Hugging Face BertForMaskedLM state dict (its tied-decoder and
// position_ids aliases checked, apps/encoder/hf_state_dict.h) or a checkpoint's model
// (apps/trainer/run/start_weights.h); --model-ema keeps, validates and saves an EMA of the weights
// (apps/trainer/step/ema.h); --sync-bn is refused (BERT has no BatchNorm).
//
// Reading order: apps/encoder/options.h, setup.h, loop.h, validation.h, checkpointing.h, report.h,
// flops.h; the step in apps/trainer/step/step.h (apps/trainer/run/clock.h holds every timing).
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "apps/encoder/checkpointing.h"  // defines: folder_options, checkpoint_if_due
#include "apps/encoder/loop.h"           // defines: LoopState, start_loop, train_until
#include "apps/encoder/options.h"        // defines: EncoderOptions, parse_options, validate
#include "apps/encoder/report.h"         // defines: RunRecord, print_start, validation_line, report
#include "apps/encoder/setup.h"          // defines: init_world, make_corpus, make_model, set_up
#include "apps/encoder/validation.h"     // defines: evaluate
#include "apps/trainer/run/clock.h"          // defines: Clock, RunClock
#include "apps/trainer/run/exit_status.h"    // defines: as_input_error
#include "apps/trainer/run/preemption.h"     // defines: RunControl, kPreemptedExit
#include "apps/trainer/run/run_flags.h"      // defines: trainer_main
#include "apps/trainer/run/run_folder.h"     // defines: RunFolder
#include "apps/trainer/run/startup.h"        // defines: check_every_rank
#include "core/check.h"                  // defines: Error
#include "data/wordpiece.h"              // defines: Vocab (--describe's vocabulary size)
#include "dist/transport/bootstrap.h"    // defines: comm_for
#include "dist/transport/busy.h"         // defines: Busy

using namespace tandem;
namespace enc = tandem::apps::encoder;

namespace {
// Taken during static initialisation, before main: "init time" includes MPI and corpus set-up.
const trainer::Clock::time_point kProcessStart = trainer::Clock::now();

// The next step where the loop must stop: a validation, a checkpoint or the end of this run.
int64_t next_stop(const enc::EncoderOptions& o, int64_t step, int64_t end) {
  int64_t s = end;
  for (int64_t every : {o.val_every, o.checkpoint_dir.empty() ? int64_t{0} : o.checkpoint_every})
    if (every > 0) s = std::min(s, (step / every + 1) * every);
  return s;
}

// --evaluate: the held-out set's masked-token accuracy and MLM loss of the weights set_up restored
// (--resume) or loaded (--weights), with the EMA's beside them when the checkpoint has one.
int evaluate_only(enc::Training& t, const enc::EncoderOptions& o) {
  if (!t.val)
    throw trainer::UsageError("--evaluate needs held-out text: --data's corpus held nothing out (pass more text, "
                              "--line-by-line for one document per line, or a smaller --held-out-every)");
  const enc::EvalResult r = enc::evaluate(t, o, t.start_at.step);
  if (t.world->rank == 0) std::cout << enc::validation_line(r, t) << std::endl;
  if (t.ema) {
    const trainer::ModelEma::Applied ema(*t.ema);
    const enc::EvalResult e = enc::evaluate(t, o, t.start_at.step);
    if (t.world->rank == 0) std::cout << "(ema) " << enc::validation_line(e, t) << std::endl;
  }
  return r.failed() ? 3 : 0;
}

// This rank's --data paths and --vocab exist ("" passed; startup.h's data check).
std::string data_check(const enc::EncoderOptions& o) {
  if (o.synthetic) return "";
  for (const std::string& p : o.data)
    if (!std::filesystem::exists(p)) return "--data " + p + " does not exist on this host: every host needs the same corpus";
  if (!o.vocab.empty() && !std::filesystem::is_regular_file(o.vocab))
    return "--vocab " + o.vocab + " is not a file on this host: every host needs the same vocabulary";
  return "";
}

int run(enc::EncoderOptions& o) {
  trainer::RunClock clock(kProcessStart);
  const dist::World& w = enc::init_world(o);
  if (o.describe) {
    // Describing a model needs no data: the vocabulary size is --vocab's (a line per token), else
    // --vocab-size; then the settings (the effective configuration, as --dump-config prints it).
    const int64_t vocab = o.vocab.empty() ? o.vocab_size : data::Vocab::load(o.vocab).size();
    auto model = enc::make_model(o, vocab, "");
    if (w.rank == 0) std::cout << model->describe() << "\n" << o.effective_config;
    return 0;
  }
  // The checkpoint folder before the corpus: a refused or unwritable folder stops the job in seconds.
  trainer::RunFolder folder = trainer::RunFolder::open(enc::folder_options(o), w, "train_encoder");
  // Every rank's folder, resume file and corpus on its host, in one verdict before tokenizing: a
  // host that lacks them stops the job now, named, instead of hanging it (apps/trainer/run/startup.h).
  trainer::check_every_rank(folder, folder.resume_path(), w, "train_encoder", [&] { return data_check(o); });
  enc::Corpus corpus;
  {
    // Tokenizing reports no progress; 30 min bounds it (a few GB of text), so the ranks already
    // waiting in the first collective wait that long before naming a hung set-up.
    dist::Busy preparing("tokenizing the corpus", {.unmeasured_s = 1800});
    corpus = trainer::as_input_error([&] { return enc::make_corpus(o); });
  }
  if (o.epochs > 0) {  // the run's length in steps, now that the training sequences are known
    const std::string said = enc::steps_from_epochs(o, corpus.train->size(),
                                                    o.batch * o.step.grad_accum_steps * (w.size / o.tp));
    if (w.rank == 0) std::cout << said << std::endl;
  }
  enc::Training t = enc::set_up(o, w, std::move(corpus), std::move(folder), enc::restore_checkpoint);
  if (o.evaluate) return evaluate_only(t, o);
  // The memory ledger's measurement after the first applied update. This trainer counts no data
  // batches apart (its loaders' and corpus's bytes are the ledger's "other", noted at set-up).
  t.memory.measure_at_first_update(*t.step, [] { return int64_t{0}; });
  // Room for one checkpoint, now rather than at the first save (--tp: the file's size, or this
  // rank's shards' estimate, which is less).
  t.folder.reserve(trainer::checkpoint_size_estimate(t.model.get(), o.optimizer, o.amp != "off", t.folder.resume_path()),
                   w);
  enc::print_start(o, t);
  enc::start_records(o, t);  // config_<run-id>.toml beside the checkpoints, the --log-file's start record

  // --checkpoint-every is this trainer's own (next_stop, checkpoint_if_due); the control adds the
  // wall-time interval and preemption.
  trainer::RunControl control(dist::comm_for(Device::cpu()), {0, o.checkpoint_interval, !o.checkpoint_dir.empty()});
  enc::LoopState loop = enc::start_loop(t, o);
  loop.control = &control;
  enc::RunRecord rec;
  while (loop.pos.step < t.end_step) {
    loop.decision = {};
    enc::train_until(t, o, loop, next_stop(o, loop.pos.step, t.end_step), clock, rec.last);
    // Validation and checkpoints are paused time: left out of the training rates.
    const trainer::RunClock::Paused paused(clock);
    const bool last = loop.pos.step == t.end_step;
    // A stop before the run's end is preempted: no validation (a scheduler's grace period is short),
    // the checkpoint at once, then exit 75. One at the run's end changes nothing.
    const bool preempted = loop.decision.stop && !last;
    if (!preempted && t.val && (last || (o.val_every > 0 && loop.pos.step % o.val_every == 0))) {
      rec.evals.push_back(enc::evaluate(t, o, loop.pos.step));
      if (w.rank == 0) std::cout << enc::validation_line(rec.evals.back(), t) << std::endl;
      enc::log_validation(t, rec.evals.back(), loop.pos.samples, trainer::epoch_number(loop.pos));
      if (t.ema) {
        // The EMA's weights in the model for one pass (apps/trainer/step/ema.h); not in the run's record.
        const trainer::ModelEma::Applied ema(*t.ema);
        const enc::EvalResult e = enc::evaluate(t, o, loop.pos.step);
        if (w.rank == 0) std::cout << "(ema) " << enc::validation_line(e, t) << std::endl;
      }
    }
    // last = true also means "write at this position" (checkpointing.h): the control asked for it.
    control.save([&] { return enc::checkpoint_if_due(t, o, loop.pos, last || loop.decision.save); });
    if (preempted) return control.exit_preempted(loop.pos.step, !o.checkpoint_dir.empty(), w.rank == 0);
  }
  return trainer::finish_run(*t.step, clock, t.dev, control, rec,
                             [&] { enc::report(o, t, clock, rec, loop.pos.step); });
}
}  // namespace

int main(int argc, char** argv) {
  return trainer::trainer_main<enc::EncoderOptions>("train_encoder", argc, argv, enc::parse_options, enc::validate, run);
}
