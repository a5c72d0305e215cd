// tests/test_config_files.cpp: what a PyTorch, Hugging Face or DeepSpeed user brings to the command
// line (issue 30): a --config file is read strictly (an unknown key, a [section] or a file that is
// not TOML is refused with what to write; snake_case keys are the kebab-case flags), a DeepSpeed
// JSON is read for the keys tandem has and any other key is refused by name, --dump-config=deepspeed
// writes one that reads back to the same settings, and foreign flag names get a hint from the one
// table (apps/trainer/run/foreign_names.h) - never the closest spelling of a flag that means something
// else - which is also the README's "Coming from PyTorch" table.
// Binaries from TANDEM_TEST_BINARY_DIR; README from TANDEM_SOURCE_DIR.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "apps/trainer/run/foreign_names.h"
#include "tests/support/app_runner.h"

namespace fs = std::filesystem;
using namespace tandem::testing;  // app, AppRun, run_app_on, slurp, scratch_dir

namespace {
const fs::path& root() {
  static const fs::path r = scratch_dir("tandem_config_files");
  return r;
}
// Writes `text` to <scratch>/<name> and returns the path.
std::string file(const std::string& name, const std::string& text) {
  const fs::path p = root() / name;
  std::ofstream(p) << text;
  return p.string();
}
// `program --synthetic --config FILE <extra> --dump-config`: what the file sets, without training.
AppRun dump(const std::string& program, const std::string& cfg, const std::string& extra = "") {
  return run_app_on(0, app(program) + " --synthetic --config " + cfg + " " + extra + " --dump-config");
}
}  // namespace

TEST_CASE("--config: an unknown key, a [section] and a file that is not TOML are refused, saying what to write") {
  struct Refused {
    const char* program;
    const char* name;
    const char* text;
    std::vector<std::string> says;  // what the refusal must say
  };
  const Refused cases[] = {
      {"train_imagenet", "unknown.toml", "batch-size = 4\nlearnig-rate-max = 0.5\n",
       {"unknown.toml line 2", "learnig-rate-max is not a train_imagenet option"}},
      {"train_imagenet", "typo.toml", "batch-szie = 4\n", {"did you mean batch-size?"}},
      // Hugging Face's name for the LR: the table's hint, not a near spelling.
      {"train_encoder", "hf.toml", "learning_rate = 0.5\n", {"learning_rate is Hugging Face's name; tandem's: --lr"}},
      {"train_imagenet", "section.toml", "[train]\nbatch-size = 4\n",
       {"sections are not read", "one `name = value` per line"}},
      {"train_imagenet", "prose.toml", "this is not a config file\n", {"not `name = value`"}},
      {"train_imagenet", "twice.toml", "batch-size = 4\nbatch_size = 8\n", {"batch-size is set twice"}},
      // --config names a file: a flag on its own is no key.
      {"train_imagenet", "config.toml", "dump-config = true\n", {}},
  };
  for (const Refused& c : cases) {
    const AppRun r = dump(c.program, file(c.name, c.text));
    INFO(c.name, ": ", r.output);
    CHECK(r.status != 0);
    for (const std::string& s : c.says) CHECK(r.has(s));
  }
}

TEST_CASE("--config: snake_case keys and aliases are the kebab-case flags; the command line still wins") {
  const AppRun r = dump("train_imagenet", file("snake.toml", "batch_size = 4\nweight_decay = 0.01\nlr-scheduler = "
                                                             "\"step\"  # a comment\nlr_milestones = [1, 2]\nwd = 0\n"),
                        "--lr 0.07");
  // wd is weight-decay's alias: refused as the same name twice.
  CHECK(r.status != 0);
  CHECK(r.has("weight-decay is set twice"));
  const AppRun ok = dump("train_imagenet", file("snake_ok.toml", "batch_size = 4\nweight_decay = 0.01\nlr_scheduler = "
                                                                 "\"step\"  # a comment\nlr_milestones = [1, 2]\n"),
                         "--lr 0.07 --batch-size 6");
  INFO(ok.output);
  REQUIRE(ok.status == 0);
  for (const char* line : {"batch-size=6", "weight-decay=0.01", "lr-scheduler=\"step\"", "lr=0.07"}) CHECK(ok.has(line));
}

TEST_CASE("a DeepSpeed JSON: the keys tandem has are read, anything else is refused by its path") {
  const std::string ds = file("ds.json", R"({
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 2,
    "zero_optimization": {"stage": 1},
    "bf16": {"enabled": true},
    "fp16": {"enabled": false},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.0003, "betas": [0.9, 0.98], "eps": 1e-06, "weight_decay": 0.05}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 5, "warmup_type": "linear",
                  "warmup_min_lr": 0, "warmup_max_lr": 0.0003, "total_num_steps": 40}},
    "gradient_clipping": 1.5,
    "steps_per_print": 7
  })");
  for (const char* program : {"train_encoder", "train_imagenet"}) {
    const AppRun r = dump(program, ds);
    INFO(program, "\n", r.output);
    REQUIRE(r.status == 0);
    for (const char* line : {"batch-size=8", "grad-accum-steps=2", "zero=1", "amp=\"bf16\"", "optimizer=\"adamw\"",
                             "lr=0.0003", "betas=[0.9, 0.98]", "eps=1e-06", "weight-decay=0.05",
                             "lr-scheduler=\"linear\"", "lr-warmup-steps=5", "steps=40", "clip-grad-norm=1.5",
                             "log-every=7"})
      CHECK(r.has(line));
  }
  // Every key tandem does not have, by name; and none of the file is applied.
  const AppRun extra = dump("train_encoder", file("ds_extra.json", R"({"train_batch_size": 64,
      "train_micro_batch_size_per_gpu": 8, "wall_clock_breakdown": false,
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})"));
  INFO(extra.output);
  CHECK(extra.status != 0);
  CHECK(extra.has("train_batch_size"));
  CHECK(extra.has("wall_clock_breakdown"));
  CHECK(extra.has("zero_optimization.offload_optimizer.device"));
  // DeepSpeed defaults that differ from tandem's must be written out.
  const AppRun log = dump("train_encoder", file("ds_log.json", R"({"optimizer": {"type": "Adam", "params": {"lr": 1e-4}},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "warmup_max_lr": 1e-4}}})"));
  CHECK(log.status != 0);
  CHECK(log.has("warmup_type"));
  const AppRun sgd = dump("train_encoder", file("ds_sgd.json", R"({"optimizer": {"type": "SGD", "params": {"momentum": 0.9}}})"));
  // train_encoder takes SGD with momentum (its parameter server's optimizer): read, not refused.
  CHECK(sgd.status == 0);
  CHECK(sgd.has("optimizer=\"sgd\""));
  CHECK(sgd.has("momentum=0.9"));
  const AppRun onebit = dump("train_imagenet", file("ds_onebit.json", R"({"optimizer": {"type": "OneBitAdam"}})"));
  CHECK(onebit.status != 0);
  CHECK(onebit.has("OneBitAdam"));
  const AppRun broken = dump("train_imagenet", file("broken.json", "{\"train_micro_batch_size_per_gpu\": 8,"));
  CHECK(broken.status != 0);
  CHECK(broken.has("not valid JSON"));
  const AppRun autos = dump("train_imagenet", file("auto.json", R"({"train_micro_batch_size_per_gpu": "auto"})"));
  CHECK(autos.status != 0);
  CHECK(autos.has("\"auto\""));
}

TEST_CASE("--dump-config=deepspeed writes a DeepSpeed JSON that reads back to the same settings") {
  const std::string flags = " --synthetic --batch-size 6 --grad-accum-steps 3 --zero 2 --amp fp16 --lr 0.002 "
                            "--betas 0.8,0.9 --weight-decay 0.1 --clip-grad-norm 2 --lr-scheduler linear --steps 30 "
                            "--lr-warmup-steps 4 --log-every 5 --seq-len 32";
  const AppRun ds = run_app_on(0, app("train_encoder") + flags + " --dump-config=deepspeed");
  INFO(ds.output);
  REQUIRE(ds.status == 0);
  CHECK(ds.has("\"train_micro_batch_size_per_gpu\": 6"));
  CHECK(ds.has("--seq-len 32 has no DeepSpeed key"));
  // stdout alone is the JSON: the stderr note goes elsewhere.
  const std::string path = (root() / "dumped.json").string();
  REQUIRE(std::system((app("train_encoder") + flags + " --dump-config=deepspeed > " + path + " 2>/dev/null").c_str()) ==
          0);
  const AppRun back = dump("train_encoder", path);
  const AppRun direct = run_app_on(0, app("train_encoder") + flags + " --dump-config");
  INFO(back.output);
  REQUIRE(back.status == 0);
  for (const char* line : {"batch-size=6", "grad-accum-steps=3", "zero=2", "amp=\"fp16\"", "lr=0.002",
                           "betas=[0.8, 0.9]", "weight-decay=0.1", "clip-grad-norm=2", "lr-scheduler=\"linear\"",
                           "steps=30", "lr-warmup-steps=4", "log-every=5"}) {
    CHECK(back.has(line));
    CHECK(direct.has(line));
  }
  const AppRun bad = run_app_on(0, app("train_encoder") + " --synthetic --dump-config=yaml");
  CHECK(bad.status != 0);
}

TEST_CASE("foreign flag names get the table's hint, never a near spelling that means something else") {
  struct Case {
    const char* program;
    const char* flag;
    const char* says;
    const char* never;
  };
  for (const Case& c : {Case{"train_imagenet", "--data-path /x", "--data-path is torchvision's name; tandem's: --data DIR", ""},
                        Case{"train_imagenet", "--output-dir /x", "tandem's: --checkpoint-dir DIR", ""},
                        Case{"train_imagenet", "--test-only", "tandem's: --evaluate --resume CKPT", ""},
                        Case{"train_imagenet", "--print-freq 10", "tandem's: --log-every N", ""},
                        Case{"train_imagenet", "-j 4", "tandem's: --workers N", ""},
                        Case{"train_encoder", "-j 4", "which train_encoder does not have", "tandem's: --workers"},
                        Case{"train_encoder", "--max-steps 23", "tandem's: --steps N", "--run-steps?"},
                        Case{"train_encoder", "--max_steps 23", "tandem's: --steps N", "--run-steps?"},
                        Case{"train_encoder", "--vocab-file v.txt", "tandem's: --vocab vocab.txt", "--vocab-size"},
                        Case{"train_imagenet", "--opt adamw", "tandem's: --optimizer", "--eps"},
                        Case{"train_encoder", "--learning-rate 1e-4", "tandem's: --lr", ""},
                        Case{"train_encoder", "--deepspeed ds.json", "tandem's: --config ds.json", ""}}) {
    const AppRun r = run_app_on(0, app(c.program) + " --synthetic " + c.flag);
    INFO(c.program, " ", c.flag, "\n", r.output);
    CHECK(r.status != 0);
    CHECK(r.has(c.says));
    if (*c.never) CHECK(!r.has(c.never));
  }
}

TEST_CASE("the foreign-name table: one row per spelling, each target a real flag, and the README shows it") {
  std::set<std::string> spellings;
  const AppRun imagenet = run_app_on(0, app("train_imagenet") + " --help");
  const AppRun encoder = run_app_on(0, app("train_encoder") + " --help");
  for (const auto& row : tandem::trainer::foreign_names()) {
    for (const std::string& s : row.spellings) {
      CHECK_MESSAGE(spellings.insert(s).second, s, " is in two rows");
      // A foreign spelling that is one of tandem's own flags would never reach the hint.
      CHECK_MESSAGE(!imagenet.has("--" + s + " "), s, " is train_imagenet's own flag");
    }
    if (!row.target.empty())
      CHECK_MESSAGE((imagenet.has(row.target + " ") || imagenet.has(row.target + ",") || encoder.has(row.target + " ")),
                    row.target, " is no trainer's flag");
    CHECK_MESSAGE(row.spellings.empty() == row.target.empty(), row.theirs);
  }
  const char* src = std::getenv("TANDEM_SOURCE_DIR");
  REQUIRE(src != nullptr);
  const std::string readme = slurp(fs::path(src) / "README.md");
  const std::string table = tandem::trainer::markdown_table();
  const bool same = readme.find("## Coming from PyTorch\n\n" + table + "\n") != std::string::npos;
  if (!same) std::ofstream(root() / "coming_from_pytorch.md") << table;
  CHECK_MESSAGE(same, "README.md's 'Coming from PyTorch' table is not apps/trainer/run/foreign_names.cpp's; the table "
                      "is in ", (root() / "coming_from_pytorch.md").string());
}
