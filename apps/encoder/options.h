// apps/encoder/options.h: train_encoder's settings and command line (CLI11).
//
// The flags are train_imagenet's words (--model, --data/--synthetic, --batch-size, --weight-decay,
// --clip-grad-norm, --optimizer with --momentum/--nesterov or --betas/--eps, --lr-scheduler,
// --lr-warmup-steps, --grad-accum-steps, --amp, --zero, --strategy ps/--ps-servers,
// --checkpoint-dir/--resume auto, --keep-checkpoints, --log-file, --config, --trace, --metrics; torchvision's and Hugging Face's where they agree); the older spellings --batch, --wd,
// --clip, --beta2 and --warmup-steps stay. What differs is text: --vocab, --seq-len, the masking
// probability, and BERT's recipe as the defaults (AdamW, warmup then linear decay, clipping at 1.0,
// no weight decay on biases and LayerNorm). The LR rule is train_imagenet's: --lr as given on any
// number of ranks, --lr-scaling linear multiplies it by the world size. The run is counted in
// optimizer steps: a text corpus is a stream, and BERT recipes are stated in steps; --epochs (HF's
// num_train_epochs) is turned into steps once the corpus is read. step_options() turns the step's
// part into the training-step library's StepOptions (apps/trainer/step/step_options.h), whose
// refusals then name these flags.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "apps/trainer/run/run_flags.h"     // defines: RunOptions
#include "apps/trainer/step/step_options.h"  // defines: StepOptions

namespace tandem::apps::encoder {

// The shared options (checkpoints, weights, communication, outputs) are RunOptions's
// (apps/trainer/run/run_flags.h); these are train_encoder's own.
// The Step's options that a flag writes directly are RunOptions::step's (--grad-accum-steps,
// --clip-grad-norm, --bucket-mb, ...), with the library's defaults but one: BERT's recipe clips the
// gradient norm at 1.0 (the library's default is off).
struct EncoderOptions : trainer::RunOptions {
  EncoderOptions() { step.clip_grad_norm = 1.0; }
  // data and model
  std::vector<std::string> data;    // text files or folders (data/text_corpus.h); needs --vocab
  std::string vocab;                // vocab.txt (apps/make_vocab writes one)
  bool synthetic = false;           // uniformly random token ids: a compute-only benchmark
  int64_t vocab_size = 30522;       // synthetic only (BERT's uncased vocab); a file sets its own
  int64_t synthetic_tokens = 1 << 22;  // synthetic training stream length (4 M tokens)
  int held_out_every = 20;          // every Nth document is held out for validation (5 %)
  bool line_by_line = false;        // every non-blank line of --data is a document (HF run_mlm --line_by_line)
  std::string text_field = "text";  // the field of a .jsonl line that is its document
  std::string model = "bert_mini";  // layers/models/bert.h sizes: bert_tiny .. bert_large
  int64_t seq_len = 128;            // BERT's phase-1 length, [CLS] and [SEP] included
  double mask_prob = 0.15;          // BERT
  uint64_t seed = 0;                // init, shuffling, masking, dropout
  double dropout = 0.1;             // BERT's hidden and attention-probability dropout (0: off, e.g.
                                    // to compare runs across world sizes: each rank draws its own masks)
  std::string device = "auto";      // auto: the GPU when one is visible, else the CPU
  // length and batch
  int64_t steps = 1000;             // optimizer steps in total (across resumes)
  int64_t epochs = 0;               // > 0: steps = ceil(epochs x training sequences / global batch),
                                    // set once the corpus is read (steps_from_epochs)
  int64_t run_steps = 0;            // >0: stop this invocation after that many steps (for --resume)
  int64_t batch = 32;               // sequences per rank per micro-batch (--batch-size; --batch, -b)
  // optimizer and schedule (BERT: AdamW, lr 1e-4 at batch 256, warmup then linear decay, wd 0.01)
  std::string optimizer = "adamw";  // adamw | lamb | sgd (sgd: the one --strategy ps runs)
  double momentum = 0.9;            // sgd: train_imagenet's default (torchvision's recipe)
  bool nesterov = false;            // sgd: Nesterov momentum
  double lr = 1e-3;                 // peak LR, used as given on any number of ranks
  std::string lr_scaling = "none";  // none | linear: --lr x world size (train_imagenet's rule)
  double wd = 0.01;                 // weight decay, not on biases and LayerNorm (BERT); decoupled (AdamW,
                                    // LAMB) or L2 (SGD)
  std::vector<double> betas{0.9, 0.999};  // torch.optim.AdamW's; RoBERTa uses beta2 0.98 for large batches
  double beta2 = -1;                // --beta2 (the old flag): overrides betas[1] when >= 0
  double eps = -1;                  // the denominator guard; -1: the optimizer's (AdamW 1e-8, LAMB 1e-6)
  std::string lr_schedule = "linear";  // --lr-scheduler after the warmup: linear (BERT) | cosine | step |
                                       // poly | constant, the names train_imagenet takes
  std::vector<int64_t> lr_milestones;  // step: the steps where lr *= lr_gamma (required for step)
  double lr_gamma = 0.1;            // step: the factor per milestone
  double lr_power = 1.0;            // poly: the exponent of (1 - progress)
  int64_t warmup_steps = -1;        // -1: 10 % of --steps (BERT used 1 % of 1 M)
  double min_lr = 0.0;              // the linear, poly and cosine decays' floor
  // precision and sharding (as train_imagenet; together, each rank keeps the masters of its shard)
  std::string amp = "off";          // off | bf16 | fp16: 16-bit model, f32 masters (apps/trainer/step/amp.h)
  int zero = 0;                     // 0 DDP | 1 sharded optimizer state | 2 also sharded gradients | 3 also parameters
  // ddp (with --zero's stage) | ps: the parameter server (dist/extras/parameter_server.h), servers on
  // ranks 0..--ps-servers-1 (RunOptions::step.ps_servers), BERT's no-decay group on the servers too.
  // ps runs SGD in f32 without clipping (apps/trainer/step/step_options.cpp refuses the rest): BERT's
  // AdamW and clipping at 1.0 stay the defaults and are refused under ps, each with the flag that
  // changes it (--optimizer sgd, --clip-grad-norm 0) - a recipe is changed by its user, not by a
  // choice of strategy.
  std::string strategy = "ddp";
  // tensor parallelism and the memory budget (issue 22)
  int tp = 1;                       // T > 1: Megatron-style TP over groups of T ranks (dist/tp/), DP over world / T
  double memory_budget_mib = 0;     // > 0: refuse at start-up a run whose predicted bytes per rank exceed it
  // output
  int64_t val_every = 0;            // steps between validations (0: only after the last step)
  int64_t val_batches = -1;         // held-out batches per rank per validation (-1: all)
  int64_t bench_warmup = -1;        // steps left out of steady rates (-1: min(10, steps/4))
  double peak_tflops = 0;           // MFU's denominator per rank; 0: estimated (apps/encoder/flops.h)
  bool describe = false;            // print the model and the settings, then exit (needs no data)
  bool evaluate = false;            // --evaluate: the held-out MLM loss and accuracy of --resume/--weights, then exit
};

// Fills `o` from argv. Returns an exit code when the program should stop (--help or a parse error,
// printed when `print`), -1 to go on.
int parse_options(int argc, char** argv, EncoderOptions& o, bool print);
// Throws tandem::Error for settings that parse but cannot work.
void validate(EncoderOptions& o);

// The step's options as the library's StepOptions (BERT's no-weight-decay rule, clipping, --amp,
// --zero, the buckets, --on-nonfinite), its messages naming this trainer's flags.
trainer::StepOptions step_options(const EncoderOptions& o);

// --epochs: sets o.steps (and the default warmup, 10 % of it) from the training set's `sequences`
// and the global batch `global_batch`; returns the line that says so. Throws when --lr-warmup-steps
// is not below the steps that gives.
std::string steps_from_epochs(EncoderOptions& o, int64_t sequences, int64_t global_batch);

}  // namespace tandem::apps::encoder
