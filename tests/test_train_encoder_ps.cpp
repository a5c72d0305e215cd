// tests/test_train_encoder_ps.cpp: `train_encoder --strategy ps` end to end, under `mpiexec -n 2` on the CPU.
//
// The parameter server (dist/extras/parameter_server.h) on the encoder must train what DDP trains
// with the same SGD (momentum, Nesterov, BERT's weight decay 0.01 but on biases and LayerNorm): the
// same batches, the gradients summed over the 2 ranks (a + b in either collective: one addition,
// exact) and halved (exact), the same elementwise SGD update in the same two groups on the servers
// as in DDP's optimizer. So the loss of every step, the last
// interval's training loss and the held-out loss and accuracy are equal bit for bit, with 1 server
// and with 2 (each holding whole tensors). Dropout is off, as in test_train_encoder_tp.cpp, so that
// the runs compare the strategies' arithmetic alone. The metrics name the strategy and the servers,
// and nothing is hidden behind backward (the push starts after it).
// And the refusals, each a sentence naming the flag to change: BERT's AdamW and its clipping at 1.0
// under ps (the defaults are refused, not changed), ps with --zero, --tp, --amp or --checkpoint-dir,
// AdamW's --betas with --optimizer sgd, --nesterov without it.
// Binaries come from TANDEM_TEST_BINARY_DIR (tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/app_runner.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace tandem::testing;  // app, AppRun, run_app, mpiexec, scratch_dir, check_refused

namespace {

// SGD with Nesterov momentum, no clipping or dropout, BERT's weight decay and no-decay group: what ps runs.
const std::string kSgd =
    " --device cpu --synthetic --synthetic-tokens 40000 --vocab-size 512 --model bert_tiny --seq-len 32 --batch 4"
    " --steps 6 --warmup-steps 1 --log-every 1 --val-batches 2 --dropout 0 --optimizer sgd --lr 0.05 --momentum 0.9"
    " --nesterov --clip-grad-norm 0";

struct Run {
  std::vector<std::string> losses;  // each progress line's loss, as printed
  json metrics;
};

Run train(const std::string& args, const fs::path& metrics) {
  const AppRun r = run_app("HYDRA_LAUNCHER=fork timeout -s KILL 300 " + mpiexec(2) + app("train_encoder") + kSgd +
                           " --metrics " + metrics.string() + " " + args);
  INFO(r.output);
  REQUIRE(r.status == 0);
  Run out;
  static const std::regex line(R"(step \d+/\d+ \| loss ([0-9.]+))");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it)
    out.losses.push_back((*it)[1]);
  std::ifstream in(metrics);
  out.metrics = json::parse(in);
  return out;
}

// A single-process command that must be refused before it trains.
std::string refused(const std::string& args) { return app("train_encoder") + " --synthetic " + args; }

}  // namespace

TEST_CASE("--strategy ps trains what DDP trains with SGD, bit for bit, with 1 and 2 servers") {
  const fs::path dir = scratch_dir("tandem_encoder_ps");
  const Run ddp = train("--strategy ddp", dir / "ddp.json");
  CHECK(ddp.metrics["strategy"] == "ddp");
  CHECK(ddp.metrics["ps_servers"] == 0);
  CHECK(ddp.metrics["optimizer"] == "sgd");
  REQUIRE(ddp.losses.size() == 6);
  for (int servers : {1, 2}) {
    CAPTURE(servers);
    const Run ps = train("--strategy ps --ps-servers " + std::to_string(servers),
                         dir / ("ps" + std::to_string(servers) + ".json"));
    CHECK(ps.metrics["strategy"] == "ps");
    CHECK(ps.metrics["ps_servers"] == servers);
    CHECK(ps.losses == ddp.losses);
    // Full doubles, not the printed 4 decimals: the same arithmetic, not only close.
    CHECK(ps.metrics["final"]["train_loss"].get<double>() == ddp.metrics["final"]["train_loss"].get<double>());
    const json &pv = ps.metrics["final"]["val"], &dv = ddp.metrics["final"]["val"];
    REQUIRE(pv.is_object());
    CHECK(pv.dump() == dv.dump());
    CHECK(ps.metrics["comm"]["overlap"].get<double>() < 0.5);  // pushed after backward: nothing to hide behind
  }
  fs::remove_all(dir);
}

TEST_CASE("--strategy ps refusals name the flag to change: BERT's defaults, --zero, --tp, checkpoints, --betas") {
  check_refused(refused("--strategy ps"), "--strategy ps runs SGD on its servers: use --optimizer sgd");
  check_refused(refused("--strategy ps --optimizer sgd"),
                "--strategy ps does not clip gradients yet: turn clipping off with --clip-grad-norm 0");
  const std::string sgd = "--strategy ps --optimizer sgd --clip-grad-norm 0 ";
  check_refused(refused(sgd + "--zero 1"), "use one of --zero or --strategy ps");
  check_refused(refused(sgd + "--tp 2"), "--tp 2 cannot run with --strategy ps");
  check_refused(refused(sgd + "--checkpoint-dir " + (fs::temp_directory_path() / "tandem_encoder_ps_ck").string()),
                "--strategy ps does not checkpoint");
  check_refused(refused(sgd + "--amp bf16"), "--strategy ps updates f32 parameters on its servers: use --amp off");
  check_refused(refused("--optimizer sgd --betas 0.9,0.98"), "--betas and --eps belong to AdamW and LAMB");
  check_refused(refused("--nesterov"), "--nesterov is SGD's: pass --optimizer sgd");
}
