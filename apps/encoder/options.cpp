// apps/encoder/options.cpp: train_encoder's command line (CLI11) and the checks between options.
#include "apps/encoder/options.h"

#include <CLI/CLI.hpp>
#include <map>

#include "core/check.h"  // defines: TANDEM_CHECK

namespace tandem::apps::encoder {

int parse_options(int argc, char** argv, EncoderOptions& o, bool print) {
  CLI::App app{"train_encoder: data-parallel BERT masked-language-model training (launch with mpiexec -n N)"};
  auto* data = app.add_option("--data", o.data, "text files or folders (fortune files, or paragraphs split at "
                                                "blank lines), e.g. /usr/share/games/fortunes");
  auto* syn = app.add_flag("--synthetic", o.synthetic, "random token ids (compute-only benchmark)");
  data->excludes(syn);
  app.add_option("--vocab", o.vocab, "vocab.txt for --data (apps/make_vocab writes one)");
  app.add_option("--vocab-size", o.vocab_size, "vocabulary of --synthetic")->capture_default_str();
  app.add_option("--synthetic-tokens", o.synthetic_tokens, "length of the synthetic training stream")
      ->capture_default_str();
  app.add_option("--held-out-every", o.held_out_every, "every Nth document is held out for validation")
      ->check(CLI::Range(2, 1 << 30))->capture_default_str();
  app.add_option("--model", o.model, "bert_tiny, bert_mini, bert_small, bert_medium, bert_base, bert_large")
      ->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "tokens per sequence, [CLS] and [SEP] included")->capture_default_str();
  app.add_option("--mask-prob", o.mask_prob, "fraction of tokens predicted")->check(CLI::Range(0.01, 0.9))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of init, shuffling, masking and dropout")->capture_default_str();
  app.add_option("--dropout", o.dropout, "hidden and attention dropout (BERT: 0.1; 0 turns it off)")
      ->check(CLI::Range(0.0, 0.9))->capture_default_str();
  app.add_option("--device", o.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--steps", o.steps, "optimizer steps in total (across resumes)")->capture_default_str();
  app.add_option("--run-steps", o.run_steps, "stop after this many steps in this run (the schedule still spans "
                                             "--steps); resume later")->check(CLI::NonNegativeNumber);
  app.add_option("--batch", o.batch, "sequences per rank per step")->capture_default_str();
  app.add_option("--optimizer", o.optimizer)->check(CLI::IsMember({"adamw", "lamb"}))->capture_default_str();
  app.add_option("--lr", o.lr, "peak learning rate (not scaled by the world size)")->capture_default_str();
  app.add_option("--wd", o.wd, "weight decay (not applied to biases and LayerNorm)")->capture_default_str();
  app.add_option("--beta2", o.beta2, "AdamW/LAMB second-moment decay")->capture_default_str();
  app.add_option("--clip", o.clip, "clip the global gradient norm to this (0: off)")->capture_default_str();
  app.add_option("--warmup-steps", o.warmup_steps, "linear warmup from 0 (default: 10% of --steps)");
  app.add_option("--min-lr", o.min_lr, "learning rate at the last step (linear decay)")->capture_default_str();
  app.add_option("--bucket-mb", o.bucket_mb, "gradient bucket size (MiB)")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--first-bucket-mb", o.first_bucket_mb, "first gradient bucket size (MiB)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--no-overlap", o.no_overlap, "all-reduce after backward instead of during it");
  app.add_option("--compress", o.compress, "gradient dtype on the wire")
      ->check(CLI::IsMember({"none", "bf16", "fp16"}))->capture_default_str();
  app.add_option("--amp", o.amp, "mixed precision: 16-bit compute with f32 master weights (fp16: with loss "
                                 "scaling); with --zero the masters are sharded too")
      ->check(CLI::IsMember({"off", "bf16", "fp16"}))->capture_default_str();
  app.add_option("--zero", o.zero, "ZeRO stage: 0 DDP, 1 shard the optimizer state (and --amp's f32 masters), 2 "
                                   "also the gradients, 3 also the parameters (each layer gathered around its use)")
      ->check(CLI::IsMember({0, 1, 2, 3}))->capture_default_str();
  app.add_option("--tp", o.tp, "tensor-parallel size T: each layer's matrices split over groups of T ranks "
                               "(Megatron), data parallel over world / T; must divide the ranks and the model's "
                               "heads, hidden size and FFN width")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--memory-budget-mib", o.memory_budget_mib,
                 "refuse at start-up (exit 2) a run whose memory ledger predicts more than this many MiB of model "
                 "state and transient gradient buffers per rank (0: no budget)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "write checkpoint_step<N>.safetensors here; the folder belongs to one run and is locked while it "
                 "trains");
  app.add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints (0: after the last step)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--checkpoint-interval", o.checkpoint_interval,
                 "also write a checkpoint once this many minutes of wall time passed since the last one (0: off)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.footer("Preemption: SIGTERM, SIGUSR1 or SIGINT makes every rank stop at the next step boundary, write a "
             "checkpoint (with --checkpoint-dir) and exit with status 75 (EX_TEMPFAIL): rerun the same command with "
             "--resume auto to continue. More signals while stopping are ignored; SIGKILL ends it at once.");
  app.add_option("--keep-checkpoints", o.keep_checkpoints, "newest checkpoints of this run to keep (0: all)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--resume", o.resume,
                 "checkpoint file to resume from, or 'auto': the newest of the run that last used --checkpoint-dir "
                 "(a fresh start when there is none); any number of ranks and any --batch");
  app.add_flag("--overwrite-checkpoints", o.overwrite_checkpoints,
               "start a new run in a --checkpoint-dir that holds other runs' checkpoints (they are kept and never "
               "pruned; --resume auto then follows the new run)");
  app.add_option("--run-id", o.run_id,
                 "this run's id (letters, digits, '.', '_', '-'): with --resume auto, continue that run; on a fresh "
                 "start, name the new run (default: a random id)");
  app.add_option("--on-nonfinite", o.on_nonfinite,
                 "a NaN/inf loss or gradient on any rank: stop the run (exit 3), skip the step on every rank, or off "
                 "(no per-step check); non-finite weights always stop, and no checkpoint is written from them")
      ->check(CLI::IsMember({"stop", "skip", "off"}))->capture_default_str();
  app.add_option("--val-every", o.val_every, "steps between validations (0: only after the last step)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--val-batches", o.val_batches, "held-out batches per rank per validation (-1: all)")
      ->capture_default_str();
  app.add_option("--log-every", o.log_every, "steps between progress lines")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--bench-warmup", o.bench_warmup, "steps excluded from the steady rates");
  app.add_option("--peak-tflops", o.peak_tflops, "peak TFLOP/s of one rank's device for MFU (default: estimated)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--trace", o.trace, "write a Chrome trace (Perfetto) of all ranks to FILE");
  app.add_option("--metrics", o.metrics, "write the JSON run summary to FILE");
  app.add_flag("--describe", o.describe, "print the model and the settings, then exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (!print) return e.get_exit_code();
    return app.exit(e);
  }
  return -1;
}

void validate(EncoderOptions& o) {
  TANDEM_CHECK(o.synthetic || !o.data.empty(), "no data: pass --data PATH... with --vocab vocab.txt (e.g. "
               "/usr/share/games/fortunes and a vocab from apps/make_vocab), or --synthetic for a compute-only "
               "benchmark");
  TANDEM_CHECK(o.synthetic || !o.vocab.empty(), "--data needs --vocab vocab.txt: build one with "
               "build/apps/make_vocab <paths> --out vocab.txt");
  TANDEM_CHECK(o.batch > 0, "--batch must be positive, got ", o.batch);
  TANDEM_CHECK(o.steps > 0, "--steps must be positive, got ", o.steps);
  TANDEM_CHECK(o.seq_len >= 8 && o.seq_len <= 512, "--seq-len ", o.seq_len,
               " is out of range: 8 to 512 (BERT has 512 position embeddings)");
  TANDEM_CHECK(o.lr > 0, "--lr must be positive, got ", o.lr);
  TANDEM_CHECK(o.clip >= 0, "--clip must be >= 0 (0: off), got ", o.clip);
  TANDEM_CHECK(o.warmup_steps < o.steps, "--warmup-steps (", o.warmup_steps, ") must be smaller than --steps (",
               o.steps, ")");
  TANDEM_CHECK(o.vocab_size >= 16, "--vocab-size must be at least 16");
  TANDEM_CHECK(o.resume.empty() || o.resume != "auto" || !o.checkpoint_dir.empty(),
               "--resume auto looks in --checkpoint-dir: pass --checkpoint-dir too");
  TANDEM_CHECK(o.checkpoint_interval == 0 || !o.checkpoint_dir.empty(),
               "--checkpoint-interval writes into --checkpoint-dir: pass --checkpoint-dir too");
  TANDEM_CHECK(!o.overwrite_checkpoints || !o.checkpoint_dir.empty(),
               "--overwrite-checkpoints is about --checkpoint-dir: pass --checkpoint-dir too, or drop it");
  TANDEM_CHECK(!o.overwrite_checkpoints || o.resume.empty(), "--overwrite-checkpoints starts a new run and --resume "
               "continues one: pass one of them");
  TANDEM_CHECK(o.run_id.empty() || !o.checkpoint_dir.empty(),
               "--run-id names the run of --checkpoint-dir: pass --checkpoint-dir too, or drop it");
  if (o.warmup_steps < 0) o.warmup_steps = o.steps / 10;
  trainer::check(step_options(o));  // the step's combinations: the library's one refusal function
}

namespace {

// The words for the library's options in this trainer's messages (apps/trainer/option_names.h).
std::string flag_name(const std::string& option, const std::string& value) {
  if (option == "strategy")
    return value == "zero1"   ? "--zero 1"
           : value == "zero2" ? "--zero 2"
           : value == "zero3" ? "--zero 3"
           : value == "ddp"   ? "--zero 0"
                              : "--zero";
  static const std::map<std::string, std::string> flags{
      {"optimizer", "--optimizer"}, {"precision", "--amp"},   {"clip_grad_norm", "--clip"},
      {"compress", "--compress"},   {"lr", "--lr"},           {"checkpoint", "--checkpoint-dir"},
      {"bucket_mb", "--bucket-mb"}, {"first_bucket_mb", "--first-bucket-mb"}, {"on_nonfinite", "--on-nonfinite"}, {"tp", "--tp"}};
  const auto it = flags.find(option);
  if (it == flags.end()) return trainer::library_option_name(option, value);  // no flag for it (yet)
  return value.empty() ? it->second : it->second + " " + value;
}

}  // namespace

trainer::StepOptions step_options(const EncoderOptions& o) {
  trainer::StepOptions s;
  s.strategy = o.zero == 1   ? trainer::Strategy::Zero1
               : o.zero == 2 ? trainer::Strategy::Zero2
               : o.zero == 3 ? trainer::Strategy::Zero3
                             : trainer::Strategy::Ddp;
  s.first_bucket_mb = o.first_bucket_mb, s.bucket_mb = o.bucket_mb, s.overlap = !o.no_overlap;
  s.compress = o.compress;
  // BERT: AdamW or LAMB, the lr set by the schedule at every step, no weight decay on biases and
  // LayerNorm (apps/trainer/param_groups.h).
  s.optimizer = o.optimizer;
  s.optimizer_options.lr = o.lr;
  s.optimizer_options.weight_decay = o.wd;
  s.optimizer_options.beta2 = o.beta2;
  s.no_decay = trainer::bert_no_weight_decay;
  s.clip_grad_norm = o.clip;
  s.precision = trainer::precision_from_name(o.amp);
  s.on_nonfinite = trainer::on_nonfinite_from_name(o.on_nonfinite);
  s.checkpoint = !o.checkpoint_dir.empty();
  s.tp = o.tp;
  s.names = flag_name;
  return s;
}

}  // namespace tandem::apps::encoder
