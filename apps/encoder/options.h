// apps/encoder/options.h: train_encoder's settings and command line (CLI11).
//
// The flags follow train_imagenet's (--model, --data/--synthetic, --batch, --amp, --zero,
// --checkpoint-dir/--resume auto, --trace, --metrics); what differs is text: --vocab, --seq-len, the
// masking probability, and BERT's recipe (AdamW or LAMB, warmup then linear decay, clipping at 1.0,
// no weight decay on biases and LayerNorm). The run is counted in optimizer steps, not epochs: a
// text corpus is a stream, and BERT recipes are stated in steps. step_options() turns the step's
// part into the training-step library's StepOptions (apps/trainer/step_options.h), whose
// refusals then name these flags.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "apps/trainer/step_options.h"  // defines: StepOptions

namespace tandem::apps::encoder {

struct EncoderOptions {
  // data and model
  std::vector<std::string> data;    // text files or folders (data/text_corpus.h); needs --vocab
  std::string vocab;                // vocab.txt (apps/make_vocab writes one)
  bool synthetic = false;           // uniformly random token ids: a compute-only benchmark
  int64_t vocab_size = 30522;       // synthetic only (BERT's uncased vocab); a file sets its own
  int64_t synthetic_tokens = 1 << 22;  // synthetic training stream length (4 M tokens)
  int held_out_every = 20;          // every Nth document is held out for validation (5 %)
  std::string model = "bert_mini";  // layers/models/bert.h sizes: bert_tiny .. bert_large
  int64_t seq_len = 128;            // BERT's phase-1 length, [CLS] and [SEP] included
  double mask_prob = 0.15;          // BERT
  uint64_t seed = 0;                // init, shuffling, masking, dropout
  double dropout = 0.1;             // BERT's hidden and attention-probability dropout (0: off, e.g.
                                    // to compare runs across world sizes: each rank draws its own masks)
  std::string device = "auto";      // auto: the GPU when one is visible, else the CPU
  // length and batch
  int64_t steps = 1000;             // optimizer steps in total (across resumes)
  int64_t run_steps = 0;            // >0: stop this invocation after that many steps (for --resume)
  int64_t batch = 32;               // sequences per rank per step
  // optimizer and schedule (BERT: AdamW, lr 1e-4 at batch 256, warmup then linear decay, wd 0.01)
  std::string optimizer = "adamw";  // adamw | lamb
  double lr = 1e-3;                 // peak LR (not scaled by the world size: Adam-type updates are
                                    // scale-free; pass a larger --lr for a larger global batch)
  double wd = 0.01;                 // decoupled weight decay, not on biases and LayerNorm (BERT)
  double beta2 = 0.999;             // torch.optim.AdamW; RoBERTa uses 0.98 for large batches
  double clip = 1.0;                // global gradient-norm clip (BERT); 0: off
  int64_t warmup_steps = -1;        // -1: 10 % of --steps (BERT used 1 % of 1 M)
  double min_lr = 0.0;              // the poly decay's floor
  // communication (as train_imagenet)
  double bucket_mb = 25;
  double first_bucket_mb = 1;
  bool no_overlap = false;
  std::string compress = "none";
  // precision and sharding (as train_imagenet; together, each rank keeps the masters of its shard)
  std::string amp = "off";          // off | bf16 | fp16: 16-bit model, f32 masters (apps/trainer/amp.h)
  int zero = 0;                     // 0 DDP | 1 sharded optimizer state | 2 also sharded gradients | 3 also parameters
  // tensor parallelism and the memory budget (issue 22)
  int tp = 1;                       // T > 1: Megatron-style TP over groups of T ranks (dist/tp/), DP over world / T
  double memory_budget_mib = 0;     // > 0: refuse at start-up a run whose predicted bytes per rank exceed it
  // checkpoints (as train_imagenet: the folder is owned by one run and locked against a second job)
  std::string checkpoint_dir;       // empty: no checkpoints
  int64_t checkpoint_every = 0;     // steps between checkpoints (0: only after the last step)
  double checkpoint_interval = 0;   // also a checkpoint once this many minutes passed since the last one
                                    // (rank 0's clock, agreed by all ranks; 0: off). apps/trainer/preemption.h
  std::string resume;               // a checkpoint file, or "auto": the newest of this folder's run
  int keep_checkpoints = 2;         // this run's newest checkpoints kept (0: all)
  bool overwrite_checkpoints = false;  // a fresh start into a folder holding other runs' checkpoints
  std::string run_id;               // "": new or the resumed file's; set: this run, and --resume auto's
  // a NaN/inf loss or gradient on any rank: stop (exit 3) | skip the step | off (apps/trainer/
  // nonfinite.h; as train_imagenet). Under --amp the loss scaler's own check skips gradient overflows.
  std::string on_nonfinite = "stop";
  // output
  int64_t val_every = 0;            // steps between validations (0: only after the last step)
  int64_t val_batches = -1;         // held-out batches per rank per validation (-1: all)
  int64_t log_every = 50;           // steps between progress lines
  int64_t bench_warmup = -1;        // steps left out of steady rates (-1: min(10, steps/4))
  double peak_tflops = 0;           // MFU's denominator per rank; 0: estimated (apps/encoder/flops.h)
  std::string trace;                // Chrome trace (all ranks, written by rank 0)
  std::string metrics;              // JSON summary (rank 0)
  bool describe = false;            // print the model and exit
};

// Fills `o` from argv. Returns an exit code when the program should stop (--help or a parse error,
// printed when `print`), -1 to go on.
int parse_options(int argc, char** argv, EncoderOptions& o, bool print);
// Throws tandem::Error for settings that parse but cannot work.
void validate(EncoderOptions& o);

// The step's options as the library's StepOptions (BERT's no-weight-decay rule, clipping, --amp,
// --zero, the buckets, --on-nonfinite), its messages naming this trainer's flags.
trainer::StepOptions step_options(const EncoderOptions& o);

}  // namespace tandem::apps::encoder
