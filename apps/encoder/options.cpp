// apps/encoder/options.cpp: train_encoder's command line (CLI11) and the checks between options.
#include "apps/encoder/options.h"

#include <CLI/CLI.hpp>

#include "apps/trainer/run/cli.h"  // defines: add_config_flags, parse (suggestions, --config, --dump-config)
#include "apps/trainer/run/run_flags.h"  // defines: add_batch_flags, add_run_flags, after_parse, check_run_options
#include "core/check.h"        // defines: TANDEM_CHECK

namespace tandem::apps::encoder {

int parse_options(int argc, char** argv, EncoderOptions& o, bool print) {
  CLI::App app{"train_encoder: data-parallel BERT masked-language-model training (launch with mpiexec -n N)"};
  auto* data = app.add_option("--data", o.data, "text files or folders (fortune files, paragraphs split at "
                                                "blank lines, lines with --line-by-line, or .jsonl with a \"text\" "
                                                "field), e.g. /usr/share/games/fortunes");
  auto* syn = app.add_flag("--synthetic", o.synthetic, "random token ids (compute-only benchmark)");
  data->excludes(syn);
  app.add_option("--vocab", o.vocab, "vocab.txt for --data (apps/make_vocab writes one)");
  app.add_option("--vocab-size", o.vocab_size, "vocabulary of --synthetic")->capture_default_str();
  app.add_option("--synthetic-tokens", o.synthetic_tokens, "length of the synthetic training stream")
      ->capture_default_str();
  app.add_option("--held-out-every", o.held_out_every, "every Nth document is held out for validation")
      ->check(CLI::Range(2, 1 << 30))->capture_default_str();
  app.add_flag("--line-by-line", o.line_by_line, "every non-blank line of --data is a document (Hugging Face "
               "run_mlm's --line_by_line); default: paragraphs at blank lines, or fortune entries");
  app.add_option("--text-field", o.text_field, "the string field of each line of a .jsonl file in --data that is "
                 "its document")->capture_default_str();
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
  auto* steps = app.add_option("--steps", o.steps, "optimizer steps in total (across resumes)")->capture_default_str();
  app.add_option("--epochs", o.epochs, "passes over the training sequences instead of --steps (HF's "
                 "num_train_epochs): steps = ceil(epochs x sequences / global batch), once the corpus is read")
      ->check(CLI::PositiveNumber)->excludes(steps);
  app.add_option("--run-steps", o.run_steps, "stop after this many steps in this run (the schedule still spans "
                                             "--steps); resume later")->check(CLI::NonNegativeNumber);
  trainer::add_batch_flags(app, o.batch, o.step.grad_accum_steps, "sequences",
                           "; each micro-batch's loss is its own masked-token mean, as in HF");
  app.add_option("--optimizer", o.optimizer, "adamw, lamb or sgd (sgd: the one --strategy ps runs)")
      ->check(CLI::IsMember({"adamw", "lamb", "sgd"}))->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  app.add_flag("--nesterov", o.nesterov, "SGD: Nesterov momentum");
  app.add_option("--lr", o.lr, "peak learning rate, used as given on any number of ranks (see --lr-scaling)")
      ->capture_default_str();
  app.add_option("--lr-scaling", o.lr_scaling,
                 "none: --lr as given (torchvision, Hugging Face); linear: --lr x world size (Goyal et al.)")
      ->check(CLI::IsMember({"none", "linear"}))->capture_default_str();
  app.add_option("--weight-decay,--wd", o.wd, "weight decay, not applied to biases and LayerNorm (decoupled for AdamW/LAMB, "
                 "L2 for SGD)")
      ->capture_default_str();
  auto* betas = app.add_option("--betas", o.betas, "AdamW/LAMB: beta1,beta2")->delimiter(',')->expected(2)
                    ->capture_default_str();
  app.add_option("--beta2", o.beta2, "AdamW/LAMB second-moment decay (the old flag; same as --betas 0.9,B2)")
      ->excludes(betas);
  app.add_option("--eps", o.eps, "AdamW/LAMB: denominator guard (default: AdamW 1e-8, LAMB 1e-6)")
      ->check(CLI::PositiveNumber);
  app.add_option("--clip-grad-norm,--clip", o.step.clip_grad_norm, "clip the global gradient norm to this (0: off)")
      ->capture_default_str();
  app.add_option("--lr-scheduler,--lr-schedule", o.lr_schedule,
                 "LR decay after the warmup, to --min-lr at --steps: linear (BERT), cosine, poly ((1 - progress)^"
                 "--lr-power), step (x --lr-gamma at each of --lr-milestones) or constant")
      ->check(CLI::IsMember({"linear", "cosine", "poly", "step", "constant"}))->capture_default_str();
  app.add_option("--lr-milestones", o.lr_milestones, "step schedule: the steps where lr *= --lr-gamma")
      ->delimiter(',');
  app.add_option("--lr-gamma", o.lr_gamma, "step schedule: the LR factor at each milestone")->capture_default_str();
  app.add_option("--lr-power", o.lr_power, "poly schedule: exponent (1: linear)")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr-warmup-steps,--warmup-steps", o.warmup_steps,
                 "linear warmup from 0 (default: 10% of --steps)");
  app.add_option("--min-lr,--lr-min", o.min_lr, "learning rate at the last step (linear, cosine and poly decay)")
      ->capture_default_str();
  app.add_option("--amp", o.amp, "mixed precision: 16-bit compute with f32 master weights (fp16: with loss "
                                 "scaling); with --zero the masters are sharded too")
      ->check(CLI::IsMember({"off", "bf16", "fp16"}))->capture_default_str();
  app.add_option("--zero", o.zero, "ZeRO stage: 0 DDP, 1 shard the optimizer state (and --amp's f32 masters), 2 "
                                   "also the gradients, 3 also the parameters (each layer gathered around its use)")
      ->check(CLI::IsMember({0, 1, 2, 3}))->capture_default_str();
  app.add_option("--strategy", o.strategy, "ddp: all-reduce during backward (with --zero's sharding); ps: synchronous "
                 "parameter server, which runs SGD without clipping: pass --optimizer sgd --clip-grad-norm 0 with "
                 "it (BERT's AdamW and clipping are refused there, not changed)")
      ->check(CLI::IsMember({"ddp", "ps"}))->capture_default_str();
  app.add_option("--ps-servers", o.step.ps_servers, "ps: servers, colocated on ranks 0..K-1")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--tp", o.tp, "tensor-parallel size T: each layer's matrices split over groups of T ranks "
                               "(Megatron), data parallel over world / T; must divide the ranks and the model's "
                               "heads, hidden size and FFN width")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--memory-budget-mib", o.memory_budget_mib,
                 "refuse at start-up (exit 2) a run whose memory ledger predicts more than this many MiB of model "
                 "state and transient gradient buffers per rank (0: no budget)")
      ->check(CLI::NonNegativeNumber);
  trainer::add_run_flags(app, o,
                         {"write checkpoint_step<N>.safetensors here", "steps between checkpoints (0: after the last step)",
                          "a Hugging Face BertForMaskedLM state dict: safetensors (model.safetensors, or "
                          "safetensors.torch.save_file(model.state_dict(), FILE)) or a torch.save file "
                          "(pytorch_model.bin, .pth, .pt)",
                          "'cls.predictions.transform.*'",
                          "SyncBatchNorm (train_imagenet); refused here: BERT has no BatchNorm"});
  app.add_option("--val-every", o.val_every, "steps between validations (0: only after the last step)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--val-batches", o.val_batches, "held-out batches per rank per validation (-1: all)")
      ->capture_default_str();
  app.add_option("--bench-warmup", o.bench_warmup, "steps excluded from the steady rates");
  app.add_option("--peak-tflops", o.peak_tflops, "peak TFLOP/s of one rank's device for MFU (default: estimated)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--evaluate", o.evaluate, "print the held-out masked-token accuracy and MLM loss of the --resume "
               "checkpoint (or of --weights), then exit (torchvision's --test-only, HF's do_eval)");
  app.add_flag("--describe", o.describe,
               "print the model (layers, parameter count) and the effective settings, then exit (no data needed: "
               "the vocabulary is --vocab's, else --vocab-size)");
  trainer::add_config_flags(app, o.dump_config, "train_encoder");
  if (int rc = trainer::parse(app, argc, argv, print, "train_encoder", o.dump_config, o.effective_config); rc >= 0)
    return rc;
  trainer::after_parse(app, o);
  if (o.beta2 >= 0) o.betas[1] = o.beta2;
  return -1;
}

void validate(EncoderOptions& o) {
  TANDEM_CHECK(o.synthetic || !o.data.empty() || o.describe, "no data: pass --data PATH... with --vocab vocab.txt (e.g. "
               "/usr/share/games/fortunes and a vocab from apps/make_vocab), or --synthetic for a compute-only "
               "benchmark");
  TANDEM_CHECK(o.synthetic || o.data.empty() || !o.vocab.empty(), "--data needs --vocab vocab.txt: build one with "
               "build/apps/make_vocab <paths> --out vocab.txt");
  TANDEM_CHECK(o.batch > 0, "--batch-size must be positive, got ", o.batch);
  TANDEM_CHECK(o.betas.size() == 2 && o.betas[0] >= 0 && o.betas[0] < 1 && o.betas[1] >= 0 && o.betas[1] < 1,
               "--betas takes two values in [0, 1), e.g. --betas 0.9,0.999");
  TANDEM_CHECK(o.optimizer != "sgd" || (o.eps < 0 && o.betas[0] == 0.9 && o.betas[1] == 0.999),
               "--betas and --eps belong to AdamW and LAMB: pass --optimizer adamw or lamb, or drop them");
  TANDEM_CHECK(o.optimizer == "sgd" || !o.nesterov, "--nesterov is SGD's: pass --optimizer sgd, or drop it");
  // Two flags that spell one library option (StepOptions::strategy): ps or a ZeRO stage, not both.
  TANDEM_CHECK(o.strategy != "ps" || o.zero == 0, "--strategy ps keeps whole partitions on its servers; ZeRO "
               "shards DDP's state instead: use one of --zero or --strategy ps");
  TANDEM_CHECK(o.lr_schedule != "step" || !o.lr_milestones.empty(), "--lr-scheduler step needs --lr-milestones "
               "STEP,STEP,... (the steps where the LR is multiplied by --lr-gamma)");
  for (size_t i = 0; i < o.lr_milestones.size(); ++i)
    TANDEM_CHECK(o.lr_milestones[i] > 0 && (i == 0 || o.lr_milestones[i] > o.lr_milestones[i - 1]),
                 "--lr-milestones must be positive steps in ascending order, e.g. 5000,8000");
  TANDEM_CHECK(o.steps > 0, "--steps must be positive, got ", o.steps);
  TANDEM_CHECK(!o.evaluate || !o.resume.empty() || !o.weights.empty(), "--evaluate needs --resume CHECKPOINT (or "
               "auto with --checkpoint-dir) or --weights FILE: the weights to evaluate");
  TANDEM_CHECK(!o.evaluate || o.weights.empty() || o.resume.empty(), "--evaluate takes the weights of --weights "
               "FILE or of the --resume checkpoint: pass one of them");
  TANDEM_CHECK(o.seq_len >= 8 && o.seq_len <= 512, "--seq-len ", o.seq_len,
               " is out of range: 8 to 512 (BERT has 512 position embeddings)");
  TANDEM_CHECK(o.lr > 0, "--lr must be positive, got ", o.lr);
  TANDEM_CHECK(o.step.clip_grad_norm >= 0, "--clip-grad-norm must be >= 0 (0: off), got ", o.step.clip_grad_norm);
  TANDEM_CHECK(o.warmup_steps < o.steps, "--lr-warmup-steps (", o.warmup_steps, ") must be smaller than --steps (",
               o.steps, ")");
  TANDEM_CHECK(o.vocab_size >= 16, "--vocab-size must be at least 16");
  if (o.warmup_steps < 0 && o.epochs == 0) o.warmup_steps = o.steps / 10;  // --epochs: steps_from_epochs
  const trainer::StepOptions step = step_options(o);
  trainer::check(step);  // the step's combinations: the library's one refusal function
  trainer::check_run_options(o, step);
  TANDEM_CHECK(o.weights.empty() || o.tp == 1, "--weights with --tp ", o.tp, " is not supported yet: load them in "
               "a --tp 1 run with --checkpoint-dir and --run-steps 1, then --resume its checkpoint at --tp ", o.tp,
               " (checkpoints are canonical and reshard)");
  TANDEM_CHECK(!o.step.sync_batchnorm, "--sync-bn synchronises BatchNorm statistics across ranks, and BERT has none (LayerNorm "
               "normalises each token by itself, the same on any number of ranks): drop --sync-bn");
}

std::string steps_from_epochs(EncoderOptions& o, int64_t sequences, int64_t global_batch) {
  TANDEM_CHECK(sequences > 0 && global_batch > 0, "--epochs needs training sequences (the corpus has none)");
  o.steps = (o.epochs * sequences + global_batch - 1) / global_batch;
  if (o.warmup_steps < 0) o.warmup_steps = o.steps / 10;
  TANDEM_CHECK(o.warmup_steps < o.steps, "--lr-warmup-steps (", o.warmup_steps, ") must be smaller than the ", o.steps,
               " steps of --epochs ", o.epochs);
  return "--epochs " + std::to_string(o.epochs) + ": " + std::to_string(o.epochs) + " x " + std::to_string(sequences) +
         " sequences / global batch " + std::to_string(global_batch) + " = " + std::to_string(o.steps) + " steps";
}

namespace {

// The words for the library's options in this trainer's messages (apps/trainer/step/option_names.h).
std::string flag_name(const std::string& option, const std::string& value) {
  if (option == "strategy") {
    if (value == "zero1" || value == "zero2" || value == "zero3") return std::string("--zero ") + value.back();
    return value.empty() ? "--strategy" : "--strategy " + value;  // ddp, ps
  }
  const std::string shared = trainer::shared_flag_name(option, value);
  return shared.empty() ? trainer::library_option_name(option, value) : shared;  // "": no flag for it (yet)
}

}  // namespace

trainer::StepOptions step_options(const EncoderOptions& o) {
  trainer::StepOptions s = o.step;  // what the flags wrote directly (run_flags.h)
  s.strategy = trainer::strategy_from_flags(o.strategy, o.zero);
  s.overlap = !o.no_overlap;
  // BERT: AdamW or LAMB (or SGD), the lr set by the schedule at every step, no weight decay on
  // biases and LayerNorm (apps/trainer/step/param_groups.h). momentum and nesterov are SGD's, betas
  // and eps AdamW's and LAMB's.
  s.optimizer = o.optimizer;
  s.optimizer_options = trainer::optimizer_from_flags(o.optimizer, o.lr, o.wd, o.momentum, o.nesterov, o.betas, o.eps);
  s.no_decay = trainer::bert_no_weight_decay;
  s.precision = trainer::precision_from_name(o.amp);
  s.on_nonfinite = trainer::on_nonfinite_from_name(o.on_nonfinite);
  s.checkpoint = !o.checkpoint_dir.empty();
  s.tp = o.tp;
  s.names = flag_name;
  return s;
}

}  // namespace tandem::apps::encoder
