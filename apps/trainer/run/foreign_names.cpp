// apps/trainer/run/foreign_names.cpp: the table of other frameworks' names (see foreign_names.h).
#include "apps/trainer/run/foreign_names.h"

#include <algorithm>

namespace tandem::trainer {

namespace {

// "--data_path" -> "data-path", "-j" -> "j": the form the spellings are written in.
std::string fold(const std::string& word) {
  std::string w = word.substr(0, word.find('='));
  w.erase(0, w.find_first_not_of('-'));
  std::replace(w.begin(), w.end(), '_', '-');
  return w;
}

// `ours` without markdown: the hint is printed on a terminal.
std::string plain(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), '`'), s.end());
  size_t at = 0;
  while ((at = s.find("\\|", at)) != std::string::npos) s.replace(at, 2, "|");
  return s;
}

}  // namespace

const std::vector<ForeignName>& foreign_names() {
  // Spellings only where the meaning is the same; the rest of a row is what the README says.
  static const std::vector<ForeignName> table{
      {"`torchrun --nproc-per-node 8 train.py`",
       "`mpiexec -n 8 build/apps/train_imagenet` (one process per GPU; several hosts: `mpiexec -f hosts`, "
       "\"Several hosts\")", "", {}, ""},
      {"`torchrun --max-restarts 3`", "`apps/scripts/elastic.sh --max-restarts 3 -- build/apps/train_imagenet ...`",
       "", {}, ""},
      {"torchvision `--model resnet50`", "`--model resnet50` (torchvision's parameter names and counts)", "", {}, ""},
      {"torchvision `--data-path DIR`", "`--data DIR` (`train/<class>/`, `val/<class>/`)", "--data", {"data-path"},
       "torchvision"},
      {"torchvision `-j`/`--workers`; HF `dataloader_num_workers`", "`--workers N` (train_imagenet)", "--workers",
       {"j", "dataloader-num-workers"}, "torchvision/Hugging Face"},
      {"torchvision `-b 32` / `--batch-size 32`; HF `per_device_train_batch_size`; DeepSpeed "
       "`train_micro_batch_size_per_gpu`",
       "`-b 32` / `--batch-size 32` (per rank)", "--batch-size",
       {"per-device-train-batch-size", "train-micro-batch-size-per-gpu"}, "Hugging Face/DeepSpeed"},
      {"torchvision `--epochs 90`; HF `num_train_epochs`", "`--epochs 90`", "--epochs",
       {"num-train-epochs"}, "Hugging Face"},
      {"HF `max_steps`", "`--steps N` (optimizer steps in all, across resumes; `--run-steps` only stops this run)",
       "--steps", {"max-steps"}, "Hugging Face"},
      {"torchvision `--lr 0.5`; HF `learning_rate`",
       "`--lr 0.5` (as given, not scaled by the world size; `--lr-scaling linear` to scale)", "--lr",
       {"learning-rate"}, "Hugging Face"},
      {"torchvision `--momentum`, `--wd`/`--weight-decay`; HF `weight_decay`",
       "`--momentum`, `--weight-decay` (`--wd`)", "", {}, ""},
      {"torchvision `--opt sgd\\|adamw`; HF `optim`", "`--optimizer sgd\\|adamw\\|lamb`", "--optimizer",
       {"opt", "optim"}, "torchvision/Hugging Face"},
      {"HF `adam_beta1`, `adam_beta2`", "`--betas B1,B2`", "--betas", {"adam-beta1", "adam-beta2"}, "Hugging Face"},
      {"HF `adam_epsilon`", "`--eps`", "--eps", {"adam-epsilon"}, "Hugging Face"},
      {"torchvision `--lr-scheduler cosineannealinglr\\|steplr`; HF `lr_scheduler_type cosine\\|linear`",
       "`--lr-scheduler cosine\\|step\\|linear\\|poly\\|constant`", "--lr-scheduler", {"lr-scheduler-type"},
       "Hugging Face"},
      {"torchvision `--lr-warmup-epochs`; HF `warmup_steps`", "`--lr-warmup-epochs`, `--lr-warmup-steps`", "", {},
       ""},
      {"torchvision `--lr-step-size`, `--lr-gamma`",
       "`--lr-milestones E1,E2,...` (the epochs where the LR drops, not their spacing), `--lr-gamma`",
       "--lr-milestones", {"lr-step-size"}, "torchvision"},
      {"torchvision `--lr-min`", "`--lr-min` (train_encoder: also `--min-lr`)", "", {}, ""},
      {"torchvision `--label-smoothing`", "`--label-smoothing`", "", {}, ""},
      {"torchvision `--val-resize-size 256 --val-crop-size 224 --interpolation bilinear`",
       "the same flags (train_imagenet; defaults: `--image-size` x 256/224, `--image-size`; bilinear only)", "", {},
       ""},
      {"torchvision `--clip-grad-norm`; HF `max_grad_norm`; DeepSpeed `gradient_clipping`", "`--clip-grad-norm`",
       "--clip-grad-norm", {"max-grad-norm", "gradient-clipping"}, "Hugging Face/DeepSpeed"},
      {"HF `gradient_accumulation_steps`; DeepSpeed `gradient_accumulation_steps`",
       "`--grad-accum-steps` (`--gradient-accumulation-steps`)", "", {}, ""},
      {"torchvision `--amp`; HF `bf16`/`fp16`; DeepSpeed `bf16.enabled`/`fp16.enabled`", "`--amp bf16\\|fp16`",
       "--amp", {"bf16", "fp16"}, "Hugging Face"},
      {"DeepSpeed `zero_optimization.stage 1\\|2\\|3`", "`--zero 1\\|2\\|3`", "", {}, ""},
      {"DDP `bucket_cap_mb`", "`--bucket-mb`", "--bucket-mb", {"bucket-cap-mb"}, "PyTorch DDP"},
      {"torchvision `--sync-bn`", "`--sync-bn`", "", {}, ""},
      {"torchvision `--model-ema`, `--model-ema-decay`", "`--model-ema [DECAY]`", "", {}, ""},
      {"torchvision `--weights NAME`; HF `from_pretrained`",
       "`--weights FILE` (a state dict: `.safetensors`, or a `torch.save` `.pth`/`.pt`; `--weights-skip PATTERN` "
       "for another head)", "", {}, ""},
      {"torchvision `--resume ckpt.pth`; HF `resume_from_checkpoint`",
       "`--resume FILE` or `--resume auto` (the newest of `--checkpoint-dir`'s run)", "--resume",
       {"resume-from-checkpoint"}, "Hugging Face"},
      {"torchvision `--output-dir`; HF `output_dir`", "`--checkpoint-dir DIR`", "--checkpoint-dir", {"output-dir"},
       "torchvision/Hugging Face"},
      {"HF `save_total_limit`", "`--keep-checkpoints N`", "--keep-checkpoints", {"save-total-limit"},
       "Hugging Face"},
      {"HF `save_steps`", "`--checkpoint-every N`", "--checkpoint-every", {"save-steps"}, "Hugging Face"},
      {"torchvision `--test-only`", "`--evaluate --resume CKPT` (or `--weights FILE`)", "--evaluate", {"test-only"},
       "torchvision"},
      {"torchvision `--print-freq`; HF `logging_steps`; DeepSpeed `steps_per_print`", "`--log-every N`",
       "--log-every", {"print-freq", "logging-steps", "steps-per-print"}, "torchvision/Hugging Face/DeepSpeed"},
      {"HF `logging_dir` / TensorBoard; DeepSpeed `wall_clock_breakdown`",
       "`--log-file log.jsonl` + `apps/scripts/plot_run.py`; `--metrics m.json`; `--trace t.json` (Perfetto)", "",
       {}, ""},
      {"HF run_mlm `--line_by_line`; a JSON-lines data set with a `text` field",
       "`--line-by-line`; `.jsonl` files in `--data` (`--text-field NAME`) (train_encoder)", "", {}, ""},
      {"HF `vocab_file` (BertTokenizer)", "`--vocab vocab.txt` (train_encoder; `apps/make_vocab` writes one)",
       "--vocab", {"vocab-file"}, "Hugging Face"},
      {"DeepSpeed `--deepspeed_config ds.json`; HF `TrainingArguments` from a file",
       "`--config ds.json` (DeepSpeed's keys that tandem has; any other key is refused by name) or `--config "
       "run.toml` (`--dump-config[=deepspeed]` writes one)",
       "--config", {"deepspeed-config", "deepspeed"}, "DeepSpeed"},
      {"`torch.backends.cudnn.deterministic = True`; torchvision `--use-deterministic-algorithms`",
       "`--deterministic`", "--deterministic", {"use-deterministic-algorithms"}, "torchvision"},
      {"`torch.cuda.graphs` / `torch.compile(mode=\"reduce-overhead\")`", "`--cuda-graph`", "", {}, ""},
  };
  return table;
}

const ForeignName* find_foreign_name(const std::string& word) {
  const std::string w = fold(word);
  for (const ForeignName& row : foreign_names())
    if (std::find(row.spellings.begin(), row.spellings.end(), w) != row.spellings.end()) return &row;
  return nullptr;
}

std::string foreign_name_hint(const std::string& word, const std::vector<std::string>& known,
                              const std::string& program) {
  const ForeignName* row = find_foreign_name(word);
  if (row == nullptr) return "";
  const std::string said = word.substr(0, word.find('='));
  if (std::find(known.begin(), known.end(), row->target) == known.end())
    return said + " is " + row->source + "'s name for what tandem calls " + row->target + ", which " + program +
           " does not have";
  return said + " is " + row->source + "'s name; tandem's: " + plain(row->ours);
}

std::string markdown_table() {
  std::string out = "| you know | tandem |\n|---|---|\n";
  for (const ForeignName& row : foreign_names()) out += "| " + row.theirs + " | " + row.ours + " |\n";
  return out;
}

}  // namespace tandem::trainer
