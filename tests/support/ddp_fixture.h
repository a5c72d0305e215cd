// tests/support/ddp_fixture.h: the DDP equivalence experiment shared by tests/mpi_ddp.cpp (CPU
// tensors) and tests/mpi_gpu_ddp.cpp (GPU tensors).
//
// The experiment: N ranks with batch b take the same SGD steps as one process with batch N*b. The
// loss is a mean over the batch, so the mean of the ranks' gradients is the full batch's gradient.
// Each rank also trains the one-process reference itself, on the whole batch (same seed, same
// device), so no separate run is needed. The model (SmallCnn) has no BatchNorm or dropout: their
// batch statistics / randomness would differ between the two sides.
// Left to the callers: the tolerance (it depends on the device and its math modes), and the extra
// cases (no_sync, compression, buffers). The helpers call collectives (DDP's, all_gather_strings)
// on the communicator they are given - the world's under mpiexec (dist::comm_for), a thread group's
// in one process (dist/transport/comm_thread.h) - so every rank must call them together; the
// check_* ones use doctest CHECKs.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "dist/reducer.h"
#include "layers/layers.h"
#include "layers/module.h"

namespace tandem::testing::ddp_fixture {

constexpr int64_t kBatch = 4;  // per-rank batch: small, so CI stays fast; 4 still has a batch sum
constexpr int kSteps = 3;      // >1 so a wrong step (stale buckets, missed zeroing) shows up
constexpr float kLr = 0.1f;    // large enough that every step visibly moves the parameters

// conv 3x3 (3->4) -> relu -> maxpool 2 -> conv 3x3 (4->6) -> relu -> flatten -> linear (96->10),
// on 8x8x3 NHWC images. Parameters are drawn on the CPU from `seed`, so every device starts from
// the same values; move the model with to(device).
struct SmallCnn : Module {
  Tensor c1w, c1b, c2w, c2b, fw, fb;
  explicit SmallCnn(uint64_t seed);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SmallCnn"; }
};

// conv 3x3 (3 -> 4, padding 1) [-> BatchNorm] -> relu -> flatten -> linear (256 -> 10) on 8x8x3
// NHWC images, from layers/ modules (so AMP's cast and ZeRO-3's units apply to them): children
// "conv", ["bn",] "fc", drawn from `seed` in that order. Without BatchNorm only the update differs
// between runs (the trainer-step tests); with it, the AMP tests see a 16-bit BN.
struct LayersNet : Module {
  Child<Conv2d> conv;
  Child<BatchNorm2d> bn;  // empty without batchnorm
  Child<Linear> fc;
  explicit LayersNet(uint64_t seed, bool batchnorm = false);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LayersNet"; }
};

struct Data {
  Tensor x, y;  // the full batch of `samples` images and labels, identical on every rank
};
// Drawn on the CPU from a fixed seed, then copied to `device`.
Data make_data(int64_t samples, Device device = Device::cpu());
// Rows [rank * kBatch, (rank + 1) * kBatch) of t: this rank's share of the full batch.
Tensor rank_rows(const Tensor& t, int rank);

void sgd_step(Module& m);  // p -= kLr * grad
void zero_grads(Module& m);

// Both diffs below return infinity when a parameter is NaN or infinite.
// max over elements of |a - b| / max(|b|, 1e-3): the CPU measure (every summation there is plain
// f32, so even near-zero parameters agree to a few ulps of their gradient sums).
double max_rel_diff(Module& a, Module& b);
// max over parameter tensors of max|a - b| / max|b|: the norm-wise measure for GPU libraries,
// whose algorithms (cuDNN Winograd/FFT, split-K GEMMs) bound the error relative to the size of
// the terms summed, not relative to each (possibly near-zero) result.
double max_tensor_rel_diff(Module& a, Module& b);

// Norm-wise per named tensor: max over the entries of `a` (leaving out the names `skip` accepts) of
// max|a - b| / max|b| (max|a - b| where b is all zeros). Infinity when a name or size of `a` has no
// match in `b`, the two lists differ in length, or a value is not finite. For optimizer states and
// named parameters.
double max_named_rel_diff(const std::vector<std::pair<std::string, Tensor>>& a,
                          const std::vector<std::pair<std::string, Tensor>>& b,
                          const std::function<bool(const std::string&)>& skip = {});

// Rank 0 writes the checkpoint `path` (creating its folder) from `model` and the optimizer `state`;
// every rank returns once the file exists (a barrier). Collective.
void save_on_rank0(dist::Communicator& comm, const std::string& path, const Module& model,
                   const std::vector<std::pair<std::string, Tensor>>& state);

// The tensor's bytes, copied to the host first when it lives on a GPU.
std::string host_bytes(const Tensor& t);
// a's and b's parameters (16-bit and f32), bit for bit and dtype for dtype, in order.
bool same_bits(Module& a, Module& b);
// The same names with the same bytes, in any order (ZeRO gathers optimizer state bucket by bucket).
bool same_state(const std::vector<std::pair<std::string, Tensor>>& a,
                const std::vector<std::pair<std::string, Tensor>>& b);
// Every rank's parameters (or their gradients), bit for bit, equal rank 0's. Collective.
bool bit_identical(dist::Communicator& comm, Module& m, bool grads = false);

// Whether `comm`'s collectives can be captured in a CUDA graph: NCCL's can; when ranks share a GPU
// they go over another backend, and this says so in a MESSAGE (the graph tests then have nothing to test).
bool collectives_capturable(dist::Communicator& comm);

struct Trained {
  std::shared_ptr<SmallCnn> model;  // the DDP replica (rank r started from seed 7 + 100 r)
  std::shared_ptr<SmallCnn> ref;    // one process, full batch, seed 7
};
// Runs kSteps of the experiment on `device` with the given reducer options; returns both models.
// The replicas start from different seeds on purpose: DDP must broadcast rank 0's weights.
Trained train_ddp_and_reference(dist::Communicator& comm, const dist::ReducerOptions& ro,
                                Device device = Device::cpu());

// Every parameter and its gradient live on `device`.
bool on_device(Module& m, Device device);
// Runs the experiment and checks that the replica stayed on `device`, matches the reference within
// `bound` (max_rel_diff on the CPU, max_tensor_rel_diff on a GPU) and is bit-identical on every
// rank. Returns the trained pair.
Trained check_equivalence(dist::Communicator& comm, const dist::ReducerOptions& ro, Device device, double bound);
// check_equivalence for bucketed x overlap on and off with several buckets (256 B, then 1 KiB),
// then with the default sizes (one bucket for this model).
void check_equivalence_grid(dist::Communicator& comm, Device device, double bound);

}  // namespace tandem::testing::ddp_fixture
