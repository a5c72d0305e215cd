// apps/trainer/run/run_flags.cpp: the flags both trainers share, their checks, and main()'s exits (see
// run_flags.h).
#include "apps/trainer/run/run_flags.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <sstream>

#include "apps/trainer/run/cli.h"          // defines: write_config_file
#include "apps/trainer/step/ema.h"          // defines: ema_refusal
#include "apps/trainer/run/exit_status.h"  // defines: kExit*, InputError, record_run_end
#include "apps/trainer/run/flag_words.h"   // defines: flag_words (library words -> flags)
#include "apps/trainer/step/nonfinite.h"    // defines: RunStopped
#include "apps/trainer/run/preemption.h"   // defines: install_stop_signals
#include "apps/trainer/run/run_folder.h"   // defines: UsageError
#include "apps/trainer/run/startup.h"      // defines: agree_on_arguments, StartupFailed
#include "apps/trainer/step/step.h"         // defines: Step
#include "core/check.h"                // defines: TANDEM_CHECK
#include "core/out_of_memory.h"        // defines: OutOfMemory
#include "dist/transport/bootstrap.h"  // defines: initialized, world, finalize
#include "dist/transport/startup.h"    // defines: launcher_world_size
#include "dist/transport/watchdog.h"   // defines: abort_job

namespace tandem::trainer {

void add_run_flags(CLI::App& app, RunOptions& o, const RunFlagHelp& help) {
  app.add_option("--bucket-mb", o.step.bucket_mb, "gradient bucket size (MiB)")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--first-bucket-mb", o.step.first_bucket_mb, "first gradient bucket size (MiB)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--no-overlap", o.no_overlap, "all-reduce after backward instead of during it");
  app.add_option("--compress", o.step.compress, "gradient dtype on the wire")
      ->check(CLI::IsMember({"none", "bf16", "fp16"}))->capture_default_str();

  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 help.checkpoint_dir + "; the folder belongs to one run and is locked while it trains");
  app.add_option("--keep-checkpoints", o.keep_checkpoints, "newest checkpoints of this run to keep (0: all)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--checkpoint-every", o.checkpoint_every, help.checkpoint_every)
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--checkpoint-interval", o.checkpoint_interval,
                 "also write a checkpoint once this many minutes of wall time passed since the last one (0: off)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.footer("Preemption: SIGTERM, SIGUSR1 or SIGINT makes every rank stop at the next step boundary, write a "
             "checkpoint (with --checkpoint-dir) and exit with status 75 (EX_TEMPFAIL): rerun the same command with "
             "--resume auto to continue. More signals while stopping are ignored; SIGKILL ends it at once.\n" +
             exit_status_help());
  app.add_option("--resume", o.resume,
                 "checkpoint file to resume from, or 'auto': the newest of the run that last used --checkpoint-dir "
                 "(a fresh start when there is none); any number of ranks and any --batch-size");
  app.add_flag("--overwrite-checkpoints", o.overwrite_checkpoints,
               "start a new run, or continue a --resume FILE's run, in a --checkpoint-dir that holds other runs' "
               "checkpoints (they are kept, never pruned and never replaced; --resume auto then follows this run)");
  app.add_option("--run-id", o.run_id,
                 "this run's id (letters, digits, '.', '_', '-'): with --resume auto, continue that run; on a fresh "
                 "start, name the new run (default: a random id)");
  app.add_option("--on-nonfinite", o.on_nonfinite,
                 "a NaN/inf loss or gradient on any rank: stop the run (exit 3), skip the step on every rank, or off "
                 "(no per-step check); non-finite weights always stop, and no checkpoint is written from them")
      ->check(CLI::IsMember({"stop", "skip", "off"}))->capture_default_str();

  app.add_option("--log-every", o.log_every, "steps between progress lines")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--trace", o.trace, "write a Chrome trace (Perfetto) of all ranks to FILE");
  app.add_option("--metrics", o.metrics, "write the JSON run summary to FILE");
  app.add_option("--log-file", o.log_file,
                 "append one JSON line per progress line and validation to FILE (apps/scripts/plot_run.py draws it; "
                 "default with --checkpoint-dir: <dir>/log_<run-id>.jsonl)");

  app.add_option("--weights", o.weights,
                 "start from these weights: " + help.weights +
                     " or a tandem checkpoint (its model tensors only); strict: every tensor must match")
      ->check(CLI::ExistingFile);
  app.add_option("--weights-skip", o.weights_skip,
                 "glob of tensors not taken from --weights, which keep their fresh init (repeatable), e.g. " +
                     help.weights_skip_example);
  app.add_flag("--sync-bn", o.step.sync_batchnorm, help.sync_bn);
  auto* ema = app.add_option("--model-ema", o.model_ema_decay,
                             "keep an exponential moving average of the weights (decay per step, default 0.9998), "
                             "validate it beside the raw weights and save it in checkpoints")
                  ->expected(0, 1)->default_str("0.9998")
                  // The help shows "[DECAY]  off unless given", not "FLOAT=0.9998", which reads as on.
                  ->option_text("[DECAY]  (off unless given)");
  app.add_option("--model-ema-decay", o.model_ema_decay, "the decay of --model-ema (torchvision's spelling)")
      ->check(CLI::Range(0.0, 1.0))->needs(ema);
}

void add_batch_flags(CLI::App& app, int64_t& batch, int& grad_accum_steps, const std::string& items,
                     const std::string& accum_note) {
  app.add_option("--batch-size,--batch,-b", batch,
                 items + " per rank per micro-batch (the global batch is this x --grad-accum-steps x ranks)")
      ->capture_default_str();
  app.add_option("--grad-accum-steps,--gradient-accumulation-steps", grad_accum_steps,
                 "micro-batches per optimizer step, their gradients summed before one update (all but the last "
                 "backward without communication" + accum_note + ")")
      ->check(CLI::PositiveNumber)->capture_default_str();
}

void after_parse(const CLI::App& app, RunOptions& o) { o.model_ema = app.count("--model-ema") > 0; }

Strategy strategy_from_flags(const std::string& strategy, int zero) {
  if (strategy == "ps") return Strategy::ParameterServer;
  return zero == 1 ? Strategy::Zero1 : zero == 2 ? Strategy::Zero2 : zero == 3 ? Strategy::Zero3 : Strategy::Ddp;
}

optim::OptimizerOptions optimizer_from_flags(const std::string& optimizer, double lr, double weight_decay,
                                             double momentum, bool nesterov, const std::vector<double>& betas,
                                             double eps) {
  optim::OptimizerOptions oo;
  oo.lr = lr;
  oo.weight_decay = weight_decay;
  if (optimizer == "sgd") {
    oo.momentum = momentum;
    oo.nesterov = nesterov;
  } else {
    oo.beta1 = betas.at(0), oo.beta2 = betas.at(1);
    if (eps > 0) oo.eps = eps;
  }
  return oo;
}

void check_run_options(const RunOptions& o, const StepOptions& step) {
  TANDEM_CHECK(o.resume.empty() || o.resume != "auto" || !o.checkpoint_dir.empty(),
               "--resume auto looks in --checkpoint-dir: pass --checkpoint-dir too");
  TANDEM_CHECK((o.checkpoint_every == 0 && o.checkpoint_interval == 0) || !o.checkpoint_dir.empty(),
               "--checkpoint-every and --checkpoint-interval write into --checkpoint-dir: pass --checkpoint-dir too");
  TANDEM_CHECK(!o.overwrite_checkpoints || !o.checkpoint_dir.empty(),
               "--overwrite-checkpoints is about --checkpoint-dir: pass --checkpoint-dir too, or drop it");
  TANDEM_CHECK(!o.overwrite_checkpoints || o.resume != "auto", "--overwrite-checkpoints lets a new run, or the run of "
               "a --resume FILE from elsewhere, write beside another run's files; --resume auto continues the "
               "folder's own run: pass one of them");
  TANDEM_CHECK(o.run_id.empty() || !o.checkpoint_dir.empty() || o.evaluate,
               "--run-id names the run of --checkpoint-dir: pass --checkpoint-dir too, or drop it");
  TANDEM_CHECK(o.weights.empty() || o.resume.empty() || o.evaluate, "--weights starts a new run from weights and "
               "--resume continues a run, with the weights of its checkpoint: pass one of them");
  TANDEM_CHECK(o.weights_skip.empty() || !o.weights.empty(), "--weights-skip names tensors of --weights: pass "
               "--weights FILE too, or drop it");
  TANDEM_CHECK(!o.model_ema || (o.model_ema_decay > 0 && o.model_ema_decay < 1), "--model-ema takes a decay in (0, "
               "1), e.g. 0.9998, got ", o.model_ema_decay);
  if (o.model_ema)
    if (auto why = ema_refusal(step)) TANDEM_THROW(*why);
}

CheckpointDirOptions folder_options(const RunOptions& o, CheckpointNaming naming, const std::string& program) {
  return {.dir = o.checkpoint_dir,
          .resume = o.resume,
          .run_id = o.run_id,
          .overwrite = o.overwrite_checkpoints,
          .keep = o.keep_checkpoints,
          .naming = naming,
          .program = program};  // use_flock: the default
}

std::string shared_flag_name(const std::string& option, const std::string& value) {
  static const std::map<std::string, std::string> flags{
      {"optimizer", "--optimizer"},         {"precision", "--amp"},
      {"clip_grad_norm", "--clip-grad-norm"}, {"grad_accum_steps", "--grad-accum-steps"},
      {"compress", "--compress"},           {"lr", "--lr"},
      {"checkpoint", "--checkpoint-dir"},   {"bucket_mb", "--bucket-mb"},
      {"first_bucket_mb", "--first-bucket-mb"}, {"on_nonfinite", "--on-nonfinite"},
      {"model_ema", "--model-ema"},         {"tp", "--tp"}};
  const auto it = flags.find(option);
  if (it == flags.end()) return "";
  return value.empty() ? it->second : it->second + " " + value;
}

std::string lr_rule(const std::string& scaling, double lr, int world, double base_lr) {
  char b[256];
  if (scaling == "linear")
    std::snprintf(b, sizeof b, "lr rule: --lr-scaling linear: --lr %g x %d rank(s) = %.4g", lr, world, base_lr);
  else
    std::snprintf(b, sizeof b, "lr rule: --lr %g as given on %d rank(s), not scaled by the world size "
                  "(--lr-scaling linear would make it %.4g)", lr, world, lr * world);
  return b;
}

RunLog start_run_records(const RunOptions& o, const RunFolder& folder, bool rank0) {
  if (rank0 && folder.owned())
    std::printf("config: %s\n", write_config_file(folder.dir(), folder.run_id(), o.effective_config).c_str());
  RunLog log = RunLog::open(RunLog::path_for(o.log_file, o.checkpoint_dir, folder.run_id()), rank0);
  if (log.enabled()) std::printf("log: %s\n", log.path().c_str());
  std::fflush(stdout);
  return log;
}

// The end of a rank that failed alone: with peers, abort_job (they may wait in a collective this
// rank will never join); alone, MPI ends cleanly, as on success - exiting with MPI (and UCX) still
// up leaves their allocations behind, which LeakSanitizer reports and turns into another status.
namespace {
void end_failed_rank(int status) {
  if (dist::initialized() && dist::world().size > 1) dist::abort_job();
  else dist::finalize(status);
}
}  // namespace

int run_main(const std::string& program, int64_t batch_per_rank, const std::function<int()>& run) {
  int rc = kExitFailure;
  try {
    rc = run();
  } catch (const RunStopped&) {
    // Every rank stopped at the same step and printed why: an agreed, clean exit.
    record_run_end(kExitNonFinite, "a non-finite value stopped every rank (the log names the step and the tensor)");
    if (dist::initialized()) dist::finalize(kExitNonFinite);
    return kExitNonFinite;
  } catch (const StartupFailed& e) {
    // Every rank reached the start-up verdict, which printed the failing ranks' words (startup.h).
    // A verdict after the folder's lock was taken leaves the folder's record saying why, not "running".
    record_run_end(e.status, flag_words(e.what()));
    dist::finalize(e.status);
    return e.status;
  } catch (const UsageError& e) {
    // Every rank refused the same thing (apps/trainer/run/run_folder.h): rank 0 says it once.
    if (dist::initialized() && dist::world().rank == 0)
      std::cerr << program << ": " << flag_words(e.what()) << "\n";
    record_run_end(kExitUsage, flag_words(e.what()));
    if (dist::initialized()) dist::finalize(kExitUsage);
    return kExitUsage;
  } catch (const InputError& e) {
    if (!e.every_rank || !dist::initialized() || dist::world().rank == 0)
      std::cerr << program << ": error: " << flag_words(e.what()) << "\n";
    record_run_end(kExitData, flag_words(e.what()));
    if (e.every_rank) {
      if (dist::initialized()) dist::finalize(kExitData);
      return kExitData;
    }
    // As below: the other ranks may wait in a collective (then mpiexec reports MPI_Abort's status,
    // and run_status.json the cause).
    end_failed_rank(kExitData);
    return kExitData;
  } catch (const OutOfMemory& e) {
    // The library says "lower the batch size"; the trainers' flag for it is --batch-size.
    std::cerr << program << ": error: " << flag_words(e.what()) << " (the batch size is --batch-size, now "
              << batch_per_rank << " per rank)\n";
    record_run_end(kExitFailure, flag_words(e.what()));
    end_failed_rank(kExitFailure);
    return kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << flag_words(e.what()) << "\n";
    record_run_end(kExitFailure, flag_words(e.what()));
    // Other ranks may be waiting in a collective this rank will never join: end them all now.
    // abort_job, not a bare MPI_Abort: it gives the launcher time to forward the line above, which
    // MPI_Abort could otherwise lose (test_train_ps saw an empty output when both ranks refused).
    end_failed_rank(kExitFailure);
    return kExitFailure;
  }
  record_run_end(rc, rc == kExitPreempted ? "a stop signal: every rank stopped at a step boundary after the checkpoint"
                                          : "");
  if (dist::initialized()) dist::finalize(rc);
  return rc;
}

bool env_rank0() {
  for (const char* v : {"PMI_RANK", "OMPI_COMM_WORLD_RANK"})
    if (const char* r = std::getenv(v)) return std::string(r) == "0";
  return true;
}

namespace {

// The command line's outcome on this rank: parse (ending the process with `rc` >= 0: --help,
// --dump-config, or a flag refused) and validate (a combination refused: 2).
struct ParseOutcome {
  int rc = -1;          // >= 0: exit with it (0: a successful --help or --dump-config)
  std::string message;  // what the parse or validate said, for the start-up verdict
};

ParseOutcome parse_and_validate(const std::string& program, const std::function<int(bool print)>& parse,
                                const std::function<void()>& validate, bool print) {
  ParseOutcome out;
  if (out.rc = parse(print); out.rc >= 0) return out;
  try {
    validate();
  } catch (const Error& e) {
    out.rc = kExitUsage;
    out.message = std::string(e.what()) + "\nRun with --help for the options.";
    if (print) std::cerr << program << ": " << out.message << "\n";
  }
  return out;
}

// Runs `f` with std::cout and std::cerr written into the returned text instead (CLI11 prints its
// help and errors there).
std::string captured(const std::function<void()>& f) {
  std::ostringstream text;
  std::streambuf* out = std::cout.rdbuf(text.rdbuf());
  std::streambuf* err = std::cerr.rdbuf(text.rdbuf());
  try {
    f();
  } catch (...) {
    std::cout.rdbuf(out), std::cerr.rdbuf(err);
    throw;
  }
  std::cout.rdbuf(out), std::cerr.rdbuf(err);
  return text.str();
}

}  // namespace

int trainer_main(const std::string& program, const std::function<int(bool print)>& parse,
                 const std::function<void()>& validate, const int64_t& batch_per_rank, const std::function<int()>& run) {
  install_stop_signals(program);
  begin_startup();  // a stop signal from here to the first step ends the process at once (preemption.h)
  if (dist::launcher_world_size() == 1) {
    const ParseOutcome o = parse_and_validate(program, parse, validate, true);
    if (o.rc >= 0) return o.rc;
    return run_main(program, batch_per_rank, run);
  }
  // More than one rank: a rank whose command line fails must not simply exit, or the others wait for
  // it forever; every rank's outcome ends in one verdict (apps/trainer/run/startup.h). The words are
  // captured so that rank 0 can repeat them with the rank and host; CLI11 writes --help's there too.
  ParseOutcome o;
  const std::string text = captured([&] { o = parse_and_validate(program, parse, validate, true); });
  if (o.rc == 0) {  // --help, --dump-config: the same on every rank, and no MPI is needed
    if (env_rank0()) std::cout << text << std::flush;
    return 0;
  }
  if (o.rc < 0 && env_rank0()) std::cout << text << std::flush;  // what a passing parse said (notes), once
  const int status = agree_on_arguments(program, o.rc > 0 ? o.rc : 0, o.message.empty() ? text : o.message);
  if (status != 0) {
    dist::finalize(status);  // every rank reached the verdict: MPI ends cleanly
    return status;
  }
  return run_main(program, batch_per_rank, run);
}

int finish_run(Step& step, RunClock& clock, Device dev, const std::function<void()>& report) {
  step.finish();
  clock.stop(dev);
  report();
  return 0;
}

}  // namespace tandem::trainer
