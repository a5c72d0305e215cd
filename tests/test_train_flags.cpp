// tests/test_train_flags.cpp: both trainers' shared command-line conventions (issue 21): one flag
// vocabulary with the old spellings kept, a suggestion for a mistyped flag, --config with flags
// overriding it and --dump-config whose output starts the same run, the configuration and the
// JSON-lines log written beside the checkpoints (plot_run.py's schema; elapsed and ETA at the end of
// progress lines), --grad-accum-steps (2 micro-batches of B = one batch of 2B on a BN-free model, on
// 1 and 2 ranks), one LR rule (--lr as given, --lr-scaling linear x ranks), and --describe without
// data. The helpers themselves (edit distance, durations) are tested directly.
// Binaries from TANDEM_TEST_BINARY_DIR; plot_run.py from TANDEM_SOURCE_DIR when a python3 has matplotlib.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/trainer/run/cli.h"
#include "apps/trainer/run/flag_suggest.h"
#include "apps/trainer/run/run_log.h"
#include "tests/support/app_runner.h"
#include "tests/support/checkpoint_compare.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace tandem::testing;  // app, AppRun, run_app, slurp, scratch_dir, ...

namespace {
tandem::testing::TinyImageDataset& scratch() { return tandem::testing::tiny_dataset("tandem_flags"); }
// small_cnn_nobn on the tiny set: 3 classes x 8 images, 16-pixel crops.
std::string tiny() {
  return " --device cpu --model small_cnn_nobn --image-size 16 --workers 1 --log-every 1 --data " + scratch().data + " ";
}
// The one *.safetensors checkpoint a run left in `dir` (the newest by name when several).
std::string checkpoint_in(const std::string& dir) {
  std::string best;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors" && e.path().string() > best) best = e.path().string();
  REQUIRE_MESSAGE(!best.empty(), "no checkpoint in ", dir);
  return best;
}
std::vector<json> jsonl(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(slurp(path));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));  // every line must be JSON
  return out;
}
}  // namespace

TEST_CASE("closest_flag: Levenshtein over the app's flags, nothing for a wild guess") {
  using tandem::trainer::closest_flag;
  using tandem::trainer::edit_distance;
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("--batch-szie", "--batch-size") == 2);
  const std::vector<std::string> known{"--batch-size", "--batch", "--lr", "--grad-accum-steps", "--sync-bn"};
  CHECK(closest_flag("--batch-szie", known) == "--batch-size");
  CHECK(closest_flag("--batch-szie=4", known) == "--batch-size");
  CHECK(closest_flag("--grad-acum-steps", known) == "--grad-accum-steps");
  CHECK(closest_flag("--completely-unrelated", known).empty());
}

TEST_CASE("duration_text and eta: minutes and seconds, the mean rate times the steps left") {
  using tandem::trainer::duration_text;
  CHECK(duration_text(0) == "0s");
  CHECK(duration_text(83) == "1m23s");
  CHECK(duration_text(245.4) == "4m05s");
  CHECK(duration_text(7500) == "2h05m");
  tandem::trainer::RunClock c(tandem::trainer::Clock::now() - std::chrono::seconds(30));
  CHECK(tandem::trainer::eta(c, 0, 10).eta_s < 0);  // no step yet: unknown
  c.init_s = 10, c.first_step = tandem::trainer::Clock::now() - std::chrono::seconds(20), c.paused_s = 10;
  const tandem::trainer::Eta e = tandem::trainer::eta(c, 5, 15);  // 10 s of training for 5 steps
  CHECK(e.eta_s == doctest::Approx(30).epsilon(0.05));
  CHECK(e.elapsed_s == doctest::Approx(30).epsilon(0.05));
  CHECK(tandem::trainer::eta_text(e).find(" | elapsed 30s eta 30s") == 0);
}

TEST_CASE("a mistyped flag gets the closest known one, in both trainers; --help has text for every flag the issue named") {
  for (const char* program : {"train_imagenet", "train_encoder"}) {
    const AppRun r = run_app_on(0, app(program) + " --synthetic --batch-szie 4");
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK(r.has("--batch-szie: did you mean --batch-size?"));
    const AppRun g = run_app_on(0, app(program) + " --synthetic --gradient-acumulation-steps 2");
    CHECK(g.has("did you mean --gradient-accumulation-steps?"));
  }
  const AppRun h = run_app_on(0, app("train_imagenet") + " --help");
  INFO(h.output);
  for (const char* text : {"SGD momentum", "Nesterov momentum", "the LR factor at each milestone",
                           "LR decay after the warmup", "label smoothing", "--lr-scaling", "--grad-accum-steps",
                           "--log-file", "--config", "--dump-config"})
    CHECK(h.has(text));
}

TEST_CASE("the old spellings keep working and --dump-config shows them under the new names") {
  const AppRun e = run_app_on(0, app("train_encoder") + " --synthetic --batch 8 --wd 0.1 --clip 0.5 --beta2 0.98 "
                                                  "--lr-schedule cosine --warmup-steps 3 --dump-config");
  INFO(e.output);
  REQUIRE(e.status == 0);
  for (const char* line : {"batch-size=8", "weight-decay=0.1", "clip-grad-norm=0.5", "beta2=0.98",
                           "lr-scheduler=\"cosine\"", "lr-warmup-steps=3", "# lr-scaling = \"none\""})
    CHECK(e.has(line));
  const AppRun i = run_app_on(0, app("train_imagenet") + " --synthetic -b 8 --wd 0.01 --clip 2 --lr-schedule step "
                                                   "--warmup-epochs 2 --no-lr-scaling --dump-config");
  INFO(i.output);
  REQUIRE(i.status == 0);
  for (const char* line : {"batch-size=8", "weight-decay=0.01", "clip-grad-norm=2", "lr-scheduler=\"step\"",
                           "lr-warmup-epochs=2", "no-lr-scaling=true"})
    CHECK(i.has(line));
  // The encoder's new schedules; step needs its milestones.
  tandem::testing::check_refused(app("train_encoder") + " --synthetic --lr-scheduler step", "--lr-milestones");
  // Accumulation is refused where the step cannot do it, naming the flag.
  tandem::testing::check_refused(app("train_imagenet") + " --synthetic --grad-accum-steps 2 --zero 2",
                                 "--grad-accum-steps 2");
}

TEST_CASE("--config: the file's values, a flag overriding one; --dump-config's output starts the same run") {
  auto& s = scratch();
  const fs::path cfg = s.root / "run.toml";
  std::ofstream(cfg) << "# a hand-written config\nbatch-size = 4\nlr = 0.05\nsteps = 3\nseed = 7\n";
  const std::string a = (s.root / "cfg_a").string(), b = (s.root / "cfg_b").string();
  const std::string cmd = app("train_imagenet") + tiny() + "--config " + cfg.string() + " --lr 0.07";
  const AppRun dump = run_app_on(0, cmd + " --checkpoint-dir " + a + " --run-id cfg-a --dump-config");
  INFO(dump.output);
  REQUIRE(dump.status == 0);
  CHECK(dump.has("lr=0.07"));       // the command line wins
  CHECK(dump.has("batch-size=4"));  // the file's
  CHECK(dump.has("seed=7"));
  CHECK(!dump.has("\nconfig="));    // --config itself is not repeated
  CHECK(!fs::exists(a));            // --dump-config only prints
  const fs::path dumped = s.root / "dumped.toml";
  std::ofstream(dumped) << dump.output;
  const AppRun ra = run_app_on(0, cmd + " --checkpoint-dir " + a + " --run-id cfg-a");
  INFO(ra.output);
  REQUIRE(ra.status == 0);
  CHECK(ra.has("lr 0.07"));
  // The effective configuration beside the checkpoints, named after the run.
  const std::string written = slurp(a + "/config_cfg-a.toml");
  CHECK(written.find("lr=0.07") != std::string::npos);
  CHECK(written.find("batch-size=4") != std::string::npos);
  // From the dumped file alone (another folder and run id): the same weights, bit for bit.
  const AppRun rb = run_app_on(0, app("train_imagenet") + " --config " + dumped.string() + " --checkpoint-dir " + b +
                               " --run-id cfg-b");
  INFO(rb.output);
  REQUIRE(rb.status == 0);
  tandem::testing::check_identical_checkpoints(checkpoint_in(a), checkpoint_in(b));
}

TEST_CASE("--grad-accum-steps 2 with batch B equals batch 2B on a BN-free model, on 1 and 2 ranks") {
  auto& s = scratch();
  for (int ranks : {1, 2}) {
    const int big = ranks == 1 ? 8 : 4;  // 8 images per step: 3 steps per epoch on 1 rank, 3 on 2
    const std::string r = std::to_string(ranks);
    const std::string one = (s.root / ("acc1_" + r)).string(), two = (s.root / ("acc2_" + r)).string();
    const std::string common = app("train_imagenet") + tiny() + "--steps 3 --lr 0.05 --momentum 0.9 ";
    const AppRun a = run_app_on(ranks, common + "--batch-size " + std::to_string(big) + " --checkpoint-dir " + one);
    INFO(a.output);
    REQUIRE(a.status == 0);
    const AppRun b = run_app_on(ranks, common + "--batch-size " + std::to_string(big / 2) +
                                    " --grad-accum-steps 2 --checkpoint-dir " + two + " --metrics " + two + "/m.json");
    INFO(b.output);
    REQUIRE(b.status == 0);
    CHECK(b.has("2 micro-batches of " + std::to_string(big / 2) + " per step"));
    const json m = json::parse(slurp(two + "/m.json"));
    CHECK(m["global_batch"] == big * ranks);
    CHECK(m["steps"] == 3);
    // The same sums in another grouping: f32 rounding only.
    const double worst = tandem::testing::check_close_checkpoints(checkpoint_in(one), checkpoint_in(two), 1e-5);
    MESSAGE(ranks, " rank(s): largest relative difference ", worst);
  }
}

TEST_CASE("--log-file: JSON lines in plot_run.py's schema; progress lines end with elapsed and ETA") {
  auto& s = scratch();
  const std::string dir = (s.root / "log").string();
  const AppRun r = run_app_on(2, app("train_imagenet") + tiny() + "--batch-size 4 --epochs 2 --lr 0.1 --run-id logged "
                                                            "--checkpoint-dir " + dir);
  INFO(r.output);
  REQUIRE(r.status == 0);
  // The LR rule, printed: --lr as given on 2 ranks.
  CHECK(r.has("lr rule: --lr 0.1 as given on 2 rank(s)"));
  CHECK(r.has("epoch 1 step 1/6 | loss "));  // epochs are counted from 1 everywhere (README)
  // ... and its new end.
  const size_t at = r.output.find("epoch 2 step 6/6 |");
  REQUIRE(at != std::string::npos);
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  CHECK(line.find(" | elapsed ") != std::string::npos);
  CHECK(line.substr(line.size() - 7) == " eta 0s");
  const std::string path = dir + "/log_logged.jsonl";  // the default name
  REQUIRE(fs::exists(path));
  const std::vector<json> recs = jsonl(path);
  // start, a step per progress line, a val and a checkpoint per epoch, end
  REQUIRE(recs.size() == 1 + 6 + 2 + 2 + 1);
  CHECK(recs.front()["event"] == "start");
  CHECK(recs.front()["program"] == "train_imagenet");
  CHECK(recs.front()["unit"] == "images");
  CHECK(recs.front()["world_size"] == 2);
  CHECK(recs.back()["event"] == "end");
  int steps = 0, vals = 0, checkpoints = 0;
  for (const json& j : recs) {
    if (j["event"] == "step") {
      ++steps;
      CHECK(j["step"] == steps);
      CHECK(j["epoch"] == (steps - 1) / 3 + 1);  // 3 steps per epoch, the first epoch is 1
      CHECK(j["samples"] == 8 * steps);
      for (const char* key : {"loss", "lr", "items_per_s", "elapsed_s", "eta_s", "mem_mib", "peak_mib"})
        CHECK_MESSAGE(j[key].is_number(), key);
      for (const char* key : {"step", "data", "compute", "exposed_comm", "host"}) CHECK(j["ms"][key].is_number());
      CHECK(j["lr"].get<double>() <= 0.1 + 1e-12);
    } else if (j["event"] == "val") {
      ++vals;
      CHECK(j["top1"].get<double>() >= 0);
      CHECK(j["step"] == 3 * vals);
      CHECK(j["epoch"] == vals);
    } else if (j["event"] == "checkpoint") {
      ++checkpoints;
      CHECK(j["step"] == 3 * checkpoints);
      CHECK(j["epoch"] == checkpoints);
      CHECK(j["path"].get<std::string>().find("checkpoint_epoch" + std::to_string(checkpoints) + ".safetensors") !=
            std::string::npos);
    }
  }
  CHECK(steps == 6);
  CHECK(vals == 2);
  CHECK(checkpoints == 2);
  // --lr-scaling linear: Goyal et al.'s rule, opted into.
  const AppRun g = run_app_on(2, app("train_imagenet") + tiny() + "--batch-size 4 --steps 1 --lr 0.1 --lr-scaling linear "
                                                            "--metrics " + (s.root / "g.json").string());
  INFO(g.output);
  REQUIRE(g.status == 0);
  CHECK(json::parse(slurp(s.root / "g.json"))["base_lr"].get<double>() == doctest::Approx(0.2));
  // The picture: plot_run.py reads the log (where python3 has matplotlib).
  // The Debian package serves /usr/bin/python3, which may not be the first python3 on PATH.
  const char* src = std::getenv("TANDEM_SOURCE_DIR");
  std::string py;
  for (const char* p : {"python3", "/usr/bin/python3"})
    if (py.empty() && std::system((std::string(p) + " -c 'import matplotlib' 2>/dev/null").c_str()) == 0) py = p;
  if (src && !py.empty()) {
    const AppRun p = tandem::testing::run_app(py + " " + std::string(src) + "/apps/scripts/plot_run.py " + path +
                                              " --out " + dir + "/curves.png");
    INFO(p.output);
    CHECK(p.status == 0);
    CHECK(fs::file_size(dir + "/curves.png") > 10000);
  }
}

TEST_CASE("train_encoder: --log-file with masked-token accuracy; --describe needs no data") {
  auto& s = scratch();
  const std::string log = (s.root / "enc.jsonl").string();
  const AppRun r = run_app_on(0, app("train_encoder") + " --device cpu --synthetic --synthetic-tokens 20000 --model bert_tiny "
                                                 "--seq-len 32 -b 4 --steps 6 --log-every 2 --val-batches 2 "
                                                 "--lr-scheduler cosine --log-file " + log);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.has("most frequent token, id "));  // synthetic ids have no text: named as an id
  CHECK(r.has("lr rule: --lr 0.001 as given on 1 rank(s)"));
  CHECK(r.has("| elapsed "));
  const std::vector<json> recs = jsonl(log);
  REQUIRE(recs.size() == 1 + 3 + 1 + 1);
  CHECK(recs[0]["unit"] == "tokens");
  CHECK(recs[1]["tokens_per_s"].get<double>() == doctest::Approx(recs[1]["items_per_s"].get<double>() * 32));
  CHECK(recs[4]["event"] == "val");
  CHECK(recs[4]["masked_acc"].is_number());
  const AppRun d = run_app_on(0, app("train_encoder") + " --describe --model bert_base");
  INFO(d.output);
  CHECK(d.status == 0);
  CHECK(d.has("# train_encoder configuration"));  // the settings after the model
  CHECK(d.has("model=\"bert_base\""));
}
