// tests/mpi_encoder_zero.cpp: ZeRO-1, 2 and 3 on the BERT encoder with train_encoder's optimizer
// (apps/trainer/step/param_groups.h with BERT's rule: AdamW with no weight decay on biases and LayerNorm,
// global-norm clipping), against DDP with the same optimizer, under mpiexec -n 2 and -n 4.
//
// The experiment of tests/mpi_encoder_ddp.cpp (rank r takes its rows of one full batch through
// mlm_loss; dropout 0; replicas seeded 7 + 100 r, so DDP must broadcast rank 0's weights), but the
// reference is DDP itself, not one process: ZeRO changes who updates which elements, not the
// gradients. ZeRO-1 all-reduces exactly as DDP does; ZeRO-2 reduce-scatters, which adds the ranks'
// gradients in the same pairs on 2 ranks and may order them differently on 4. The global norm is
// summed per shard, then across ranks (not in DDP's order): clipping's factor differs in its last
// bits. So the bound is 1e-6 relative per tensor (max|a - b| / max|b|, as tests/mpi_zero.cpp's
// stage 2), after K = 3 steps, with AdamW at lr 1e-3 and eps 1e-6. ZeRO-1 (any N) and ZeRO-2 on 2
// ranks come out exactly equal to DDP on the CPU. ZeRO-2 on 4 ranks: 2e-5 - AdamW divides each
// gradient by its own magnitude plus eps, so an element whose 4-rank sum nearly cancels (a few in
// the value/query biases and FFN weights) turns the last-bit difference of the summation order
// into up to lr * delta / eps of its update. eps is BERT's own 1e-6 (Devlin et al.'s Adam, not
// PyTorch's 1e-8) because at 1e-8 that amplification made the result depend on the BLAS kernel:
// 1.3e-6 with OpenBLAS's AVX2 kernels, 1.4e-4 (a value bias) with its AVX-512 ones. At 1e-6:
// 5.9e-7 (AVX2, OPENBLAS_CORETYPE=Haswell or Zen) and 4.5e-6 (AVX-512: Cooperlake, OpenBLAS's
// pick on the AVX-512 VM, and SkylakeX; Sandybridge the same). The key biases - zero at init, their
// gradient zero in exact arithmetic (softmax ignores a shift shared by all keys), so rounding noise
// that AdamW moves by +-lr either way (mpi_encoder_ddp.cpp) - are left out of the comparison; every
// other tensor is compared.
// ZeRO-3 reduce-scatters as ZeRO-2 (same bound), with each BertLayer a unit gathered around its
// forward and backward (BertEncoder runs them through Module::call) and the embeddings, the tied
// decoder and the pooler in the root unit; its weights are compared inside full_parameters().
// Also: ranks stay bit-identical; the gathered optimizer state equals DDP's unsharded state (same
// names, 1e-6); the tied decoder weight is one parameter, held once across the ranks' shards; and
// a checkpoint written under ZeRO-2 resumes under DDP, ZeRO-1 and ZeRO-2 equal to the
// uninterrupted DDP run.
#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "apps/trainer/step/param_groups.h"
#include "dist/transport/bootstrap.h"
#include "dist/ddp.h"
#include "dist/zero.h"
#include "checkpoint/checkpoint.h"
#include "layers/models/bert.h"
#include "tests/support/ddp_fixture.h"
#include "tests/support/encoder_fixture.h"

using namespace tandem;
using namespace tandem::dist;
using tandem::trainer::ParamGroups;
using namespace tandem::testing::encoder_fixture;
using tandem::testing::ddp_fixture::bit_identical;
using tandem::testing::ddp_fixture::max_named_rel_diff;
using tandem::testing::ddp_fixture::save_on_rank0;

namespace {

constexpr int64_t kB = 2;  // sequences per rank
constexpr int kSteps = 3;

// This rank's rows of tests/support/encoder_fixture.h's full batch.
MlmBatch my_rows() { return rows(full_batch(world().size * kB), world().rank * kB, kB); }

// One training run: the model in DDP, sharded when stage > 0, with train_encoder's ParamGroups.
struct Run {
  std::shared_ptr<models::BertForMaskedLM> model;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<Zero> zero;
  std::unique_ptr<ParamGroups> opt;

  // ckpt: a checkpoint to resume (weights before DDP's broadcast, then the optimizer state).
  Run(int stage, BucketingOptions buckets, const std::string& ckpt = "") {
    model = std::make_shared<models::BertForMaskedLM>(tiny_config(), 7 + 100 * world().rank);
    optim::NamedTensors load;
    if (!ckpt.empty()) load = load_checkpoint(ckpt, *model).optimizer;
    DdpOptions o;
    o.reducer.bucketing = buckets;
    if (stage == 2) o.reducer.collective = Collective::ReduceScatter;
    ddp = std::make_unique<DistributedDataParallel>(model, dist::comm_for(Device::cpu()), o);
    optim::OptimizerOptions oo;
    oo.lr = 1e-3;
    oo.weight_decay = 0.01;
    oo.eps = 1e-6;  // BERT's; see the header
    if (stage == 0) {
      opt = std::make_unique<ParamGroups>("adamw", model->named_parameters(), oo, trainer::bert_no_weight_decay);
    } else {
      zero = std::make_unique<Zero>(*ddp, stage);
      opt = std::make_unique<ParamGroups>("adamw", *zero, oo, trainer::bert_no_weight_decay);
    }
    if (!load.empty()) opt->load_state(load);
  }

  void steps(int n) {
    const MlmBatch b = my_rows();
    for (int i = 0; i < n; ++i) {
      Tensor loss = ddp->forward_with([&](Module&) { return model->mlm_loss(b.ids, b.mask, b.types, b.labels); });
      opt->zero_grad();
      loss.backward();
      opt->clip_grad_norm(1.0);
      opt->step();
    }
  }
};

// The bound of the header: 1e-6, or 2e-5 where ZeRO-2's reduce-scatter sums more than two ranks.
double bound(bool reduce_scattered) { return reduce_scattered && world().size > 2 ? 2e-5 : 1e-6; }

bool key_bias(const std::string& name) { return name.find("attention.self.key.bias") != std::string::npos; }

// Norm-wise per tensor (ddp_fixture's max_named_rel_diff), the key biases left out (see the header).
double model_diff(Module& a, Module& b) { return max_named_rel_diff(a.named_parameters(), b.named_parameters(), key_bias); }
double state_diff(const optim::NamedTensors& a, const optim::NamedTensors& b) { return max_named_rel_diff(a, b, key_bias); }

}  // namespace

TEST_CASE("encoder: ZeRO-1, 2 and 3 with BERT's AdamW groups and clipping == DDP; ranks bit-identical") {
  for (BucketingOptions buckets : {BucketingOptions{4096, 16384}, BucketingOptions{}}) {
    CAPTURE(buckets.bucket_bytes);
    Run ddp(0, buckets);
    ddp.steps(kSteps);
    const optim::NamedTensors ds = ddp.opt->state();
    for (int stage : {1, 2, 3}) {
      CAPTURE(stage);
      Run z(stage, buckets);
      z.steps(kSteps);
      const FullParameters weights = z.zero->full_parameters();  // stage 3: gathered for the look
      const double diff = model_diff(*z.model, *ddp.model);
      if (world().rank == 0) MESSAGE("stage ", stage, ": diff to DDP ", diff);
      CHECK(diff <= bound(stage >= 2));
      CHECK(bit_identical(dist::comm_for(Device::cpu()), *z.model));
      const optim::NamedTensors zs = z.opt->state();  // collective: rank 0 gets the tensors
      if (world().rank == 0) CHECK(state_diff(zs, ds) <= 1e-6);
    }
  }
}

TEST_CASE("encoder: the tied decoder weight is one parameter, held once across the ZeRO shards") {
  Run z(2, {4096, 16384});
  int64_t tensors = 0;
  for (auto& [name, p] : z.model->named_parameters()) {
    ++tensors;
    CHECK(name.find("decoder.weight") == std::string::npos);  // HF lists it as an alias; tandem does not
  }
  CHECK(z.zero->num_params() == tensors);
  // Every element of every parameter in exactly one rank's segments: the shards add up to the
  // parameter count with the tie counted once.
  double mine = 0;
  for (const optim::ParamSegment& s : z.zero->segments()) mine += static_cast<double>(s.param.numel());
  std::vector<double> total{mine};
  z.zero->sum_reduce()(total);
  CHECK(static_cast<int64_t>(total[0]) == z.model->num_parameters());
}

TEST_CASE("encoder: a ZeRO-2 checkpoint resumes under DDP, ZeRO-1 and ZeRO-2 equal to the uninterrupted run") {
  constexpr int kBefore = 2, kAfter = 2;
  const BucketingOptions buckets{4096, 16384};
  const std::string dir = (std::filesystem::temp_directory_path() / "tandem_mpi_encoder_zero").string();
  const std::string path = dir + "/ckpt_np" + std::to_string(world().size) + ".safetensors";
  Run whole(0, buckets);
  whole.steps(kBefore + kAfter);
  Run first(2, buckets);
  first.steps(kBefore);
  save_on_rank0(dist::comm_for(Device::cpu()), path, *first.model, first.opt->state());
  for (int stage : {0, 1, 2}) {
    CAPTURE(stage);
    Run resumed(stage, buckets, path);
    resumed.steps(kAfter);
    CHECK(model_diff(*resumed.model, *whole.model) <= bound(true));  // the first half ran ZeRO-2
    CHECK(bit_identical(dist::comm_for(Device::cpu()), *resumed.model));
  }
  all_gather_strings("done");
  if (world().rank == 0) std::filesystem::remove_all(dir);
}
