// tests/test_trainer_options.cpp: the training-step library's options, in one process
// (apps/trainer/step/step_options.h, option_names.h, param_groups.h's rules; core/backend.h's scope).
//
//  - The refusal table: every combination of strategy x precision x optimizer x clipping x
//    accumulation x CUDA graph x capturable x non-finite policy x wire dtype x checkpoints is refused exactly
//    when step_options.h's table of what works says so - the table is restated here on its own,
//    so the code and the header cannot drift apart unnoticed.
//  - Every refusal names options through StepOptions::names: with a trainer's names no library
//    name ("StepOptions::") leaks, with none the message names only library options (no "--").
//  - The trainers' messages as their users read them (train_imagenet's flags).
//  - refusal_on: a CUDA graph needs a GPU and NCCL collectives.
//  - The no-weight-decay rules: BERT's by name, and the normalisation layers' parameters of a model.
//  - BackendScope applies a whole config and puts the previous one back, nested scopes included.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "apps/trainer/step/param_groups.h"
#include "apps/trainer/step/step_options.h"
#include "core/backend.h"
#include "core/check.h"
#include "layers/models/bert.h"
#include "layers/models/models.h"

using namespace tandem;
using namespace tandem::trainer;

namespace {

// step_options.h's "What works", restated independently of step_options.cpp.
bool works(const StepOptions& o) {
  const bool ps = o.strategy == Strategy::ParameterServer;
  if (o.compress != "none" && o.compress != "bf16" && o.compress != "fp16") return false;
  const bool scatters = o.strategy == Strategy::Zero2 || o.strategy == Strategy::Zero3;
  if (scatters && o.compress != "none") return false;
  if (o.grad_accum_steps < 1) return false;
  if (o.grad_accum_steps > 1 && scatters) return false;
  if (ps && (o.precision != Precision::F32 || o.clip_grad_norm > 0 || o.optimizer != "sgd" || o.checkpoint ||
             o.compress != "none"))
    return false;
  if (o.cuda_graph && (o.strategy != Strategy::Ddp || o.grad_accum_steps != 1 || o.on_nonfinite != OnNonfinite::Off))
    return false;
  if (o.capturable && o.strategy != Strategy::Ddp) return false;
  // TP: over ddp, zero1 or zero2, any precision, with SGD or AdamW, eagerly.
  if (o.tp > 1 && (ps || o.strategy == Strategy::Zero3 || o.cuda_graph || o.capturable || o.optimizer == "lamb"))
    return false;
  return true;
}

std::string describe(const StepOptions& o) {
  return std::string(strategy_name(o.strategy)) + " " + precision_name(o.precision) + " " + o.optimizer + " clip " +
         std::to_string(o.clip_grad_norm) + " accum " + std::to_string(o.grad_accum_steps) + " graph " +
         std::to_string(o.cuda_graph) + " capturable " + std::to_string(o.capturable) + " nonfinite " + std::to_string(static_cast<int>(o.on_nonfinite)) +
         " compress " + o.compress + " checkpoint " + std::to_string(o.checkpoint) + " tp " + std::to_string(o.tp);
}

// Every combination the table speaks of, with `names` set on each.
std::vector<StepOptions> all_combinations(const OptionNames& names) {
  std::vector<StepOptions> all;
  for (Strategy s : {Strategy::Ddp, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3, Strategy::ParameterServer})
    for (Precision p : {Precision::F32, Precision::BF16, Precision::F16})
      for (const char* opt : {"sgd", "adamw", "lamb"})
        for (double clip : {0.0, 1.0})
          for (int accum : {0, 1, 4})
            for (bool graph : {false, true})
             for (bool capturable : {false, true})
              for (OnNonfinite nf : {OnNonfinite::Stop, OnNonfinite::Skip, OnNonfinite::Off})
                for (const char* compress : {"none", "bf16", "fp16", "int8"})
                  for (bool checkpoint : {false, true})
                   for (int tp : {1, 2}) {
                    StepOptions o;
                    o.tp = tp;
                    o.strategy = s, o.precision = p, o.optimizer = opt, o.clip_grad_norm = clip;
                    o.grad_accum_steps = accum, o.cuda_graph = graph, o.on_nonfinite = nf;
                    o.capturable = capturable;
                    o.compress = compress, o.checkpoint = checkpoint, o.names = names;
                    all.push_back(o);
                  }
  return all;
}

// A trainer's names: every option in angle brackets, so a message shows what went through them.
std::string bracketed(const std::string& option, const std::string& value) {
  return "<" + option + (value.empty() ? "" : " " + value) + ">";
}

// train_imagenet's spelling of the options these messages use (apps/train/options.cpp).
std::string imagenet_flags(const std::string& option, const std::string& value) {
  if (option == "strategy")
    return value.rfind("zero", 0) == 0 ? "--zero " + value.substr(4) : "--strategy" + (value.empty() ? "" : " " + value);
  const std::string flag = option == "cuda_graph"       ? "--cuda-graph"
                           : option == "precision"      ? "--amp"
                           : option == "clip_grad_norm" ? "--clip-grad-norm"
                           : option == "on_nonfinite"   ? "--on-nonfinite"
                           : option == "checkpoint"     ? "--checkpoint-dir"
                                                        : "--" + option;
  return value.empty() ? flag : flag + " " + value;
}

}  // namespace

TEST_CASE("refusal() refuses exactly the combinations step_options.h's table says cannot work") {
  int refused = 0, accepted = 0;
  for (const StepOptions& o : all_combinations(bracketed)) {
    const std::optional<std::string> why = refusal(o);
    INFO(describe(o), " -> ", why.value_or("works"));
    CHECK(why.has_value() == !works(o));
    if (why) {
      ++refused;
      CHECK(why->find("StepOptions::") == std::string::npos);  // every option went through `names`
      CHECK(why->find('<') != std::string::npos);
      CHECK_THROWS_AS(check(o), Error);
    } else {
      ++accepted;
      CHECK_NOTHROW(check(o));
    }
  }
  MESSAGE(accepted, " combinations work, ", refused, " are refused");
  CHECK(accepted > 100);  // the grid is not all refusals
}

TEST_CASE("without a trainer's names, refusals name the library's options and no flag") {
  for (StepOptions o : all_combinations({})) {
    const std::optional<std::string> why = refusal(o);
    if (!why) continue;
    INFO(*why);
    CHECK(why->find("StepOptions::") != std::string::npos);
    CHECK(why->find("--") == std::string::npos);
  }
  StepOptions o;
  o.cuda_graph = true, o.on_nonfinite = OnNonfinite::Off, o.grad_accum_steps = 2;
  CHECK(refusal(o).value() ==
        "StepOptions::cuda_graph captures one forward and backward per step, and StepOptions::grad_accum_steps = 2 "
        "runs several (each would need its own static inputs): drop one of them");
}

TEST_CASE("a CUDA graph takes AdamW, LAMB, AMP and clipping (the capturable update); capturable refuses ZeRO and ps") {
  for (const char* opt : {"sgd", "adamw", "lamb"})
    for (Precision p : {Precision::F32, Precision::BF16, Precision::F16}) {
      StepOptions o;
      o.cuda_graph = true, o.on_nonfinite = OnNonfinite::Off, o.optimizer = opt, o.precision = p, o.clip_grad_norm = 1;
      CAPTURE(describe(o));
      CHECK_FALSE(refusal(o).has_value());
      o.cuda_graph = false, o.capturable = true, o.on_nonfinite = OnNonfinite::Stop, o.grad_accum_steps = 3;
      CHECK_FALSE(refusal(o).has_value());  // without a graph: the loss check and accumulation too
    }
  StepOptions z;
  z.capturable = true, z.strategy = Strategy::Zero1;
  CHECK(refusal(z).value().rfind("StepOptions::capturable with StepOptions::strategy = zero1 is not supported yet", 0) ==
        0);
  z.strategy = Strategy::ParameterServer;
  CHECK(refusal(z).value().rfind("StepOptions::capturable cannot run with StepOptions::strategy = ps", 0) == 0);
}

TEST_CASE("a trainer's names make the refusals read as its flags") {
  StepOptions o;
  o.names = imagenet_flags;
  o.cuda_graph = true, o.on_nonfinite = OnNonfinite::Stop;
  CHECK(refusal(o).value().rfind("--cuda-graph cannot capture --on-nonfinite stop: ", 0) == 0);
  o.on_nonfinite = OnNonfinite::Off, o.optimizer = "adamw", o.precision = Precision::BF16;
  CHECK_FALSE(refusal(o).has_value());
  o.optimizer = "sgd", o.precision = Precision::F32, o.strategy = Strategy::Zero1;
  CHECK(refusal(o).value().rfind("--cuda-graph with --zero 1 is not supported yet", 0) == 0);
  o.strategy = Strategy::ParameterServer;
  CHECK(refusal(o).value().rfind("--cuda-graph cannot capture --strategy ps: ", 0) == 0);
  o.cuda_graph = false, o.on_nonfinite = OnNonfinite::Stop;
  CHECK(!refusal(o).has_value());
  o.checkpoint = true;
  CHECK(refusal(o).value() == "--strategy ps does not checkpoint (the optimizer state lives on the servers): drop "
                              "--checkpoint-dir, or use --strategy ddp");
  // "Turn it off", not "drop": train_encoder clips by default.
  o.checkpoint = false, o.clip_grad_norm = 1;
  CHECK(refusal(o).value() == "--strategy ps does not clip gradients yet: turn clipping off with --clip-grad-norm 0, "
                              "or use --strategy ddp");
  // A no-decay group (train_encoder's BERT rule) runs on the servers too.
  o.clip_grad_norm = 0, o.no_decay = bert_no_weight_decay, o.optimizer_options.weight_decay = 0.01;
  CHECK_FALSE(refusal(o).has_value());
  StepOptions z;
  z.names = imagenet_flags;
  z.strategy = Strategy::Zero2, z.compress = "bf16";
  CHECK(refusal(z).value() == "--zero 2 with --compress bf16 is not supported (stage 2 reduce-scatters f32 "
                              "gradients): drop --compress or use --zero 1");
  z.compress = "none", z.grad_accum_steps = 2;
  CHECK(refusal(z).value().find("Use --zero 1 with accumulation") != std::string::npos);
  // ZeRO-3: as stage 2 for the wire dtype and accumulation, and never in a CUDA graph.
  z.strategy = Strategy::Zero3;
  CHECK(refusal(z).value().rfind("--grad_accum_steps 2 with --zero 3 is not supported: stage 3 keeps", 0) == 0);
  z.grad_accum_steps = 1, z.compress = "fp16";
  CHECK(refusal(z).value() == "--zero 3 with --compress fp16 is not supported (stage 3 reduce-scatters f32 "
                              "gradients): drop --compress or use --zero 1");
  z.compress = "none", z.cuda_graph = true, z.on_nonfinite = OnNonfinite::Off;
  CHECK(refusal(z).value().rfind("--cuda-graph cannot capture --zero 3: its step allocates each unit's gathered "
                                 "parameters", 0) == 0);
  z.cuda_graph = false;
  CHECK(!refusal(z).has_value());
}

TEST_CASE("refusal_on: a CUDA graph needs a GPU and NCCL collectives; without one nothing depends on the place") {
  StepOptions o;
  CHECK(!refusal_on(o, Device::cpu(), "mpi").has_value());
  o.cuda_graph = true, o.on_nonfinite = OnNonfinite::Off;
  CHECK(refusal_on(o, Device::cpu(), "mpi").value().find("StepOptions::cuda_graph needs a GPU, and this run is on "
                                                         "the CPU") == 0);
  CHECK(refusal_on(o, Device::cuda(0), "mpi+host-staging").value().find("go over mpi+host-staging") !=
        std::string::npos);
  CHECK_THROWS_AS(check_on(o, Device::cpu(), "mpi"), Error);
}

TEST_CASE("tp_refusal: T must divide the world size, the heads, the hidden size and the FFN width") {
  StepOptions o;
  o.names = imagenet_flags;
  CHECK_FALSE(tp_refusal(o, 3, 3, 3, 3));  // tp 1: nothing to split
  o.tp = 2;
  CHECK_FALSE(tp_refusal(o, 4, 12, 768, 3072));
  CHECK_FALSE(tp_refusal(o, 4, 12, 0, 0));  // 0: a size the model lacks
  CHECK(tp_refusal(o, 3, 12, 768, 3072).value() ==
        "--tp 2 needs a world size divisible by 2 (a grid of 2 TP ranks by world / 2 data-parallel ranks), and this "
        "run has 3 ranks: launch a multiple of 2 ranks or pick a --tp that divides 3");
  CHECK(tp_refusal(o, 4, 3, 768, 3072).value().find("the model's attention heads (3)") != std::string::npos);
  CHECK(tp_refusal(o, 4, 4, 11, 3072).value().find("hidden size (11)") != std::string::npos);
  CHECK(tp_refusal(o, 4, 4, 16, 31).value().find("FFN width (31)") != std::string::npos);
  o.tp = 0;
  CHECK(refusal(o).value() == "--tp 0 must be at least 1 (1: no tensor parallelism)");
}

TEST_CASE("strategy and precision names round-trip; unknown names are refused") {
  for (Strategy s : {Strategy::Ddp, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3, Strategy::ParameterServer})
    CHECK(strategy_from_name(strategy_name(s)) == s);
  for (Precision p : {Precision::F32, Precision::BF16, Precision::F16})
    CHECK(precision_from_name(precision_name(p)) == p);
  CHECK_THROWS_AS(strategy_from_name("zero4"), Error);
  CHECK_THROWS_AS(precision_from_name("fp8"), Error);
  CHECK(is_zero(Strategy::Zero2));
  CHECK(zero_stage(Strategy::Zero3) == 3);
  CHECK_FALSE(is_zero(Strategy::ParameterServer));
}

TEST_CASE("ddp_options: buckets in MiB, overlap, compression, and ZeRO-2/3's reduce-scatter") {
  StepOptions o;
  o.bucket_mb = 2, o.first_bucket_mb = 0.5, o.overlap = false, o.compress = "fp16";
  dist::DdpOptions d = ddp_options(o);
  CHECK(d.reducer.bucketing.bucket_bytes == size_t{2} << 20);
  CHECK(d.reducer.bucketing.first_bucket_bytes == size_t{1} << 19);
  CHECK_FALSE(d.reducer.overlap);
  CHECK(d.reducer.compression == dist::Compression::F16);
  CHECK(d.reducer.collective == dist::Collective::AllReduce);
  o.strategy = Strategy::Zero2, o.compress = "none";
  CHECK(ddp_options(o).reducer.collective == dist::Collective::ReduceScatter);
  o.strategy = Strategy::Zero3;  // dist::Zero regroups the buckets by unit; reduce-scatter from the start
  CHECK(ddp_options(o).reducer.collective == dist::Collective::ReduceScatter);
}

TEST_CASE("no-weight-decay rules: BERT's by name, and a model's normalisation layers") {
  CHECK(bert_no_weight_decay("bert.encoder.layer.0.attention.self.query.bias"));
  CHECK(bert_no_weight_decay("bert.embeddings.LayerNorm.weight"));
  CHECK_FALSE(bert_no_weight_decay("bert.encoder.layer.0.attention.self.query.weight"));
  CHECK_FALSE(bert_no_weight_decay("bias_free.weight"));

  ModulePtr resnet = models::create_model("resnet_tiny", 10, 0);
  const NoDecayRule norms = norm_layer_parameters(*resnet);
  int64_t bn = 0, other = 0;
  for (const auto& [name, p] : resnet->named_parameters()) {
    INFO(name);
    // torchvision's names: bn1/bn2 and downsample.1 are BatchNorm2d, everything else convs and fc.
    const bool is_bn = name.find("bn") != std::string::npos || name.find("downsample.1") != std::string::npos;
    CHECK(norms(name) == is_bn);
    (is_bn ? bn : other) += 1;
  }
  CHECK(bn > 0);
  CHECK(other > 0);
  CHECK_FALSE(norms("fc.bias"));  // a bias outside a norm layer keeps its decay under this rule

  models::BertForMaskedLM bert(models::bert_config("bert_tiny", 128), 0);
  const NoDecayRule bert_norms = norm_layer_parameters(bert);
  for (const auto& [name, p] : bert.named_parameters())
    CHECK(bert_norms(name) == (name.find("LayerNorm") != std::string::npos));
}

TEST_CASE("BackendScope applies a whole config and puts the previous one back, nested scopes too") {
  const BackendConfig start = backend();
  CHECK(start == BackendConfig{});  // nothing else in this process changed the defaults
  BackendConfig a;
  a.deterministic = true, a.cudnn_batchnorm = false, a.conv_workspace_limit = 1 << 20;
  {
    BackendScope outer(a);
    CHECK(backend() == a);
    CHECK(outer.previous() == start);
    BackendConfig b = a;
    b.allow_tf32 = false, b.conv_bias_fusion = false;
    {
      BackendScope inner(b);
      CHECK(backend() == b);
    }
    CHECK(backend() == a);
  }
  CHECK(backend() == start);
  BackendConfig bad;
  bad.conv_workspace_limit = -1;
  CHECK_THROWS_AS(BackendScope{bad}, Error);
  CHECK(backend() == start);  // a refused config changes nothing
}
