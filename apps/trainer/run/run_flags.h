// apps/trainer/run/run_flags.h: the options both trainers share - one meaning, one default and one flag
// each - and what both do with them: register the flags, cross-check them, name the checkpoint
// folder, and turn a failure into the process's exit status.
//
// train_imagenet's TrainOptions and train_encoder's EncoderOptions derive from RunOptions and add
// their own (data, model, schedule). What lives here is what a user expects to spell and mean the
// same in both: the checkpoint folder and its run (--checkpoint-dir, --resume, --keep-checkpoints,
// --checkpoint-every/-interval, --overwrite-checkpoints, --run-id), the starting weights and the EMA
// (--weights, --weights-skip, --sync-bn, --model-ema), the gradient communication (--bucket-mb,
// --first-bucket-mb, --no-overlap, --compress), the non-finite policy, and the outputs (--trace,
// --metrics, --log-file). Where the two trainers word a flag's help differently (checkpoint names,
// the unit of --checkpoint-every, the weights' naming convention) the trainer passes the words in
// RunFlagHelp. This is the command line's side of apps/trainer/: the Step library itself never
// names a flag (option_names.h maps its options to each trainer's words).
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "apps/trainer/run/clock.h"         // defines: RunClock
#include "apps/trainer/run/preemption.h"    // defines: RunControl
#include "apps/trainer/run/run_folder.h"    // defines: RunFolder
#include "apps/trainer/run/run_log.h"       // defines: RunLog
#include "apps/trainer/step/step_options.h"  // defines: StepOptions
#include "checkpoint/checkpoint_dir.h"      // defines: CheckpointDirOptions, CheckpointNaming

namespace tandem::trainer {

class Step;  // apps/trainer/step/step.h (finish_run only calls it)

struct RunOptions {
  // The Step's options that flags write directly (--bucket-mb, --first-bucket-mb, --compress): their
  // defaults are the library's; each trainer's step_options() starts from this one.
  StepOptions step;
  bool no_overlap = false;          // all-reduce after backward (baseline)
  // checkpoints (checkpoint/checkpoint_dir.h: the folder is owned by one run and locked against a
  // second job; apps/trainer/run/run_folder.h opens it at start-up)
  std::string checkpoint_dir;       // empty: no checkpoints
  std::string resume;               // a checkpoint file, or "auto": the newest of this folder's run
  int keep_checkpoints = 2;         // this run's newest checkpoints kept (0: all): a resume needs the newest,
                                    // and the one before it is the fallback should the newest be damaged
  int64_t checkpoint_every = 0;     // also a checkpoint after every N-th step (0: off), so a preemption
                                    // loses at most N steps
  double checkpoint_interval = 0;   // also a checkpoint once this many minutes passed since the last one
                                    // (rank 0's clock, agreed by all ranks; 0: off). apps/trainer/run/preemption.h
  bool overwrite_checkpoints = false;  // a fresh start, or a --resume FILE of another run, into a folder holding
                                       // other runs' checkpoints (they stay, never pruned nor replaced;
                                       // --resume auto follows this run)
  std::string run_id;               // "": a new run id (fresh start) or the resumed file's; set: this
                                    // run's id, and --resume auto resumes that run
  bool evaluate = false;            // only evaluate a checkpoint's (or --weights') weights, then exit;
                                    // train_imagenet has the flag
  // a NaN/inf loss or gradient on any rank: stop (exit 3, no checkpoint from that state) | skip the
  // step on every rank | off (no per-step host sync); non-finite weights stop under stop and skip,
  // and a checkpoint is never written from them, off included. apps/trainer/step/nonfinite.h
  std::string on_nonfinite = "stop";
  // outputs
  int64_t log_every = 50;           // steps between progress lines
  std::string trace;                // Chrome trace (all ranks, written by rank 0)
  std::string metrics;              // JSON summary (rank 0)
  std::string log_file;             // JSON-lines run log (apps/trainer/run/run_log.h); "": <checkpoint-dir>/
                                    // log_<run-id>.jsonl with a folder, else none
  std::string dump_config;          // --dump-config[=toml|deepspeed]: print the effective configuration
                                    // in that form and exit ("": not asked)
  std::string effective_config;     // filled by parse: the --config text of this run (not a flag)
  // pretrained weights, SyncBatchNorm, the EMA of the weights
  std::string weights;              // a state dict with torchvision's / Hugging Face's names, or a tandem
                                    // checkpoint's model tensors (apps/trainer/run/start_weights.h); strict
  std::vector<std::string> weights_skip;  // globs left at their fresh init, dropped from the file (a new head)
  bool model_ema = false;           // keep, validate and save an EMA of the weights (apps/trainer/step/ema.h)
  double model_ema_decay = 0.9998;  // per applied step: timm's ModelEmaV3 default (apps/trainer/step/ema.h says why)
};

// The trainer's own words in the shared flags' help.
struct RunFlagHelp {
  std::string checkpoint_dir;    // "write checkpoint_epoch<N>.safetensors here ..."
  std::string checkpoint_every;  // what N counts and where the files go
  std::string weights;           // which naming convention --weights takes
  std::string weights_skip_example;  // e.g. "'fc.*' to fine-tune with another --num-classes"
  std::string sync_bn;           // what --sync-bn does (or why it is refused) in this trainer
};

// Registers the shared flags on `app`, bound to `o`'s fields.
void add_run_flags(CLI::App& app, RunOptions& o, const RunFlagHelp& help);

// --batch-size (aliases --batch and -b) and --grad-accum-steps, bound to the trainer's own fields
// (their defaults differ): `items` says what a batch holds ("images", "sequences"), `accum_note`
// adds the trainer's words to --grad-accum-steps' help ("" for none).
void add_batch_flags(CLI::App& app, int64_t& batch, int& grad_accum_steps, const std::string& items,
                     const std::string& accum_note);

// After a successful parse: the fields a flag's presence sets (--model-ema without a value).
void after_parse(const CLI::App& app, RunOptions& o);

// The cross-checks of the shared flags, each with the sentence that says what to do (TANDEM_CHECK);
// `step` is the trainer's StepOptions (the EMA's refusals are about the strategy).
void check_run_options(const RunOptions& o, const StepOptions& step);

// What both trainers' --strategy ddp|ps and --zero 0-3 name together (ps takes no --zero).
Strategy strategy_from_flags(const std::string& strategy, int zero);
// --optimizer and its options as the Step's: momentum and nesterov are SGD's, betas (beta1, beta2)
// and eps AdamW's and LAMB's (eps <= 0: the optimizer's default); the lr is the peak, which the
// schedule overwrites at every step.
optim::OptimizerOptions optimizer_from_flags(const std::string& optimizer, double lr, double weight_decay,
                                             double momentum, bool nesterov, const std::vector<double>& betas,
                                             double eps);

// The checkpoint folder's settings from the flags; dir empty: no folder.
CheckpointDirOptions folder_options(const RunOptions& o, CheckpointNaming naming, const std::string& program);

// The flag both trainers spell for a library option (option_names.h's keys: "optimizer" ->
// "--optimizer", "precision" -> "--amp", ...), with " value" appended when `value` is not empty;
// "" for an option the trainers name differently or not at all (the strategy, CUDA graphs).
std::string shared_flag_name(const std::string& option, const std::string& value);

// The LR rule in words, printed at start-up so that a run moved to another world size is no
// surprise: "lr rule: --lr 0.2 as given on 2 rank(s), not scaled ..." (`scaling`: none | linear;
// `base_lr`: the LR the schedule peaks at).
std::string lr_rule(const std::string& scaling, double lr, int world, double base_lr);

// At start-up, after the folder is open: rank 0 writes the run's configuration into the folder
// (config_<run-id>.toml) and says where; every rank opens the JSON-lines log (--log-file, or the
// folder's log_<run-id>.jsonl; rank 0 writes, the others hold a disabled one), rank 0 says where.
RunLog start_run_records(const RunOptions& o, const RunFolder& folder, bool rank0);

// A trainer's main() after the parse: runs `run` and maps what it throws to the exit status every
// rank agrees on (apps/trainer/run/exit_status.h's table) - 3 for a non-finite stop (RunStopped), 2 for
// a refusal (UsageError, printed once by rank 0), a failed start-up check's own status (StartupFailed,
// apps/trainer/run/startup.h), 65 for a data or input error (InputError), 1 for anything else (printed by
// the rank that failed, which then ends every rank: the others may wait in a collective it will never
// join). An allocation failure gets the trainer's batch flag named beside the library's advice.
// Records the end in the folder's run_status.json (rank 0, when the run opened a folder). Finalizes
// the world on the agreed exits.
int run_main(const std::string& program, int64_t batch_per_rank, const std::function<int()>& run);

// Before MPI is up, the launcher's environment says which rank we are (MPICH: PMI_RANK, Open MPI:
// OMPI_COMM_WORLD_RANK); true when neither is set (a process started alone).
bool env_rank0();

// A trainer's whole main(), in this order: install_stop_signals(program) and begin_startup() first, so
// that a stop signal during start-up ends the process at once (preemption.h); `parse(print)` ends the
// process with its code when that is >= 0; `validate` refuses a combination by throwing an Error,
// printed with a pointer to --help (exit 2, as a parse error is: apps/trainer/run/cli.cpp maps
// CLI11's own codes); then run_main with the parsed batch (`batch_per_rank` is
// read after the parse). With more than one rank a failed parse or validate does not end the process
// at once: every rank's outcome meets in one verdict (apps/trainer/run/startup.h, agree_on_arguments), so
// a failure on one rank ends them all, named by rank 0, instead of leaving them waiting for it.
int trainer_main(const std::string& program, const std::function<int(bool print)>& parse,
                 const std::function<void()>& validate, const int64_t& batch_per_rank, const std::function<int()>& run);

// The same for a trainer's Options (a RunOptions with its own `batch`) and its three functions:
// parse_options(argc, argv, o, print), validate(o) and run(o).
template <class Options, class Parse, class Validate, class Run>
int trainer_main(const std::string& program, int argc, char** argv, Parse parse, Validate validate, Run run) {
  Options o;
  return trainer_main(
      program, [&](bool print) { return parse(argc, argv, o, print); }, [&] { validate(o); }, o.batch,
      [&] { return run(o); });
}

// The run's end after its last step: the last update's weights checked (a non-finite one stops
// here, exit 3, not as "done"), the clock stopped (a device sync), then `report`. Returns 0, main's
// status for a finished run.
int finish_run(Step& step, RunClock& clock, Device dev, const std::function<void()>& report);

// The same, with the trainer's run record (its checkpoints_written) counting the checkpoints
// `control` wrote before `report` reads it.
template <class Record>
int finish_run(Step& step, RunClock& clock, Device dev, const RunControl& control, Record& rec,
               const std::function<void()>& report) {
  return finish_run(step, clock, dev, [&] {
    rec.checkpoints_written = control.saves();
    report();
  });
}

}  // namespace tandem::trainer
