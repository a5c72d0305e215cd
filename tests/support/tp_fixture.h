// tests/support/tp_fixture.h: the experiment of the tensor-parallel tests (tests/test_tp_bert.cpp,
// tests/test_tp_grid.cpp, tests/mpi_tp.cpp).
//
// The model is encoder_fixture's small BERT with 4 heads (so T = 4 splits them) and a vocabulary
// of 50 (uneven at T = 4: 13, 13, 12, 12), dropout 0: one function on every side. The reference is
// BertForMaskedLM on one rank; the TP model starts from the same seed, so from its shards
// (tp/bert.h: the init is drawn shard by shard at the canonical counters).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/ddp.h"
#include "dist/tp/bert.h"
#include "dist/tp/grid.h"
#include "dist/zero.h"
#include "checkpoint/state_dict.h"
#include "optim/optimizer.h"
#include "tests/support/ddp_fixture.h"
#include "tests/support/encoder_fixture.h"

namespace tandem::testing::tp_fixture {

// What every TP test uses beside this fixture: the encoder's tiny config and the comparisons.
using namespace tandem::testing::encoder_fixture;
using tandem::testing::ddp_fixture::bit_identical;
using tandem::testing::ddp_fixture::max_named_rel_diff;

constexpr int kSteps = 5;     // AdamW steps of the equivalence tests (the figure)
constexpr double kLr = 1e-2;  // large enough that 5 steps move every weight well past rounding

BertConfig tp_config();

struct Reference {
  std::vector<double> losses;  // per step
  NamedTensors params;         // after the last step (CPU, state_dict order)
  NamedTensors state;          // AdamW's state after the last step
};
// BertForMaskedLM(cfg, 7) in `dtype` on one rank, `steps` AdamW steps on the whole batch `b`.
Reference train_reference(const BertConfig& cfg, const encoder_fixture::MlmBatch& b, DType dtype, int steps);

struct Trained {
  std::shared_ptr<dist::tp::TpBertForMaskedLM> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::vector<double> losses;
};
// TpBertForMaskedLM(cfg, tp, 7) in `dtype`, `steps` AdamW steps on `b` (every rank of tp the same b).
Trained train_tp(const BertConfig& cfg, const encoder_fixture::MlmBatch& b, DType dtype, int steps,
                 dist::Communicator& tp);
// One more AdamW step of a TP or canonical model: zero_grad, mlm_loss on b, backward, step.
double adamw_step(Module& model, optim::Optimizer& opt, const encoder_fixture::MlmBatch& b);

// The canonical model's loss and gradients on `b` at the given canonical parameters (`dtype`).
struct Gradient {
  double loss = 0;
  NamedTensors grads;
};
Gradient reference_gradient(const BertConfig& cfg, const NamedTensors& params, const encoder_fixture::MlmBatch& b,
                            DType dtype);

// One training run on a grid of TP size `tp` over `world` (tests/test_tp_grid.cpp, tests/mpi_tp.cpp):
// DDP (zero_stage 0) or ZeRO-1/2 over the DP groups, AdamW. tp = 1 trains the canonical
// BertForMaskedLM under DDP over the whole world: the baseline. DP group d trains on sequences
// [d b, (d + 1) b) of a batch of kGridBatch, b = kGridBatch / DP.
constexpr int64_t kGridBatch = 8;
struct GridRun {
  std::unique_ptr<dist::tp::Grid> grid;
  ModulePtr model;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<dist::Zero> zero;
  std::unique_ptr<optim::Optimizer> opt;
  encoder_fixture::MlmBatch mine;

  GridRun(dist::Communicator& world, int tp, int zero_stage, DType dtype);
  Tensor loss();      // this DP rank's masked-LM loss, through DDP's forward_with
  double backward();  // zero_grad, forward, backward; the mean over DP ranks of the loss
  void update();      // the optimizer step (and ZeRO's parameter gather)
  double step() {
    const double l = backward();
    update();
    return l;
  }
  NamedTensors canonical();  // the canonical parameters (gathered over TP)
  NamedTensors grads();      // the canonical gradients (after backward)
};

// Same names, shapes, dtypes and bytes, in the same order.
bool same_bits(const NamedTensors& a, const NamedTensors& b);
// Every replicated parameter (and, with grads, its gradient) has the same bits on every rank of
// the model's TP group. Collective over model.comm().
bool replicas_identical(dist::tp::TpBertForMaskedLM& model, bool grads = false);
// The canonical tensors of a TP model's parameters or gradients (gathered over its TP group).
NamedTensors canonical_params(dist::tp::TpBertForMaskedLM& model);
NamedTensors canonical_grads(dist::tp::TpBertForMaskedLM& model);
NamedTensors grads_of(const Module& model);

// max_named_rel_diff's skip for comparisons after AdamW: the attention key biases, whose gradient
// is 0 in exact arithmetic (softmax ignores a shift shared by every key), so what they get is
// rounding noise, different on each side whatever the parallelism, and AdamW's g / (sqrt(v) + eps)
// turns noise into steps (tests/mpi_encoder_ddp.cpp's comment): relative to each other the two
// sides' key biases differ by O(1). They are checked instead to have stayed at the noise level.
bool key_bias(const std::string& name);
// The largest |value| of the key biases (parameters) or of their gradients, for that check.
double key_bias_max(const NamedTensors& params);

}  // namespace tandem::testing::tp_fixture
