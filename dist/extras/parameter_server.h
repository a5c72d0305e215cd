// dist/extras/parameter_server.h: a synchronous parameter server - the baseline that all-reduce replaced.
//
// Read it as a contrast to the reducer (dist/reducer.h). Every rank still holds a full replica and
// computes gradients on its own slice of the batch, but the averaging and the optimizer step are
// centralised: the parameters are split into K partitions, partition s belongs to *server* s, and
// after backward each step is
//   1. push - every worker's gradients of partition s are summed at server s (Communicator::reduce
//             to root s of one flat buffer per partition, sent in PsOptions::piece_bytes pieces:
//             the .cpp says why), and the server divides by N;
//   2. update - server s runs the optimizer on its partition only (f32); the optimizer and its
//             state (momentum, Adam moments) exist only on servers, workers run none;
//   3. pull - server s broadcasts its updated partition, and every rank copies it into its model.
// N ranks with batch b therefore compute what DDP (and one process with batch N*b) computes, and
// after the pull every rank's parameters are bit-identical (tests/mpi_parameter_server.cpp).
//
// Choices, with their reasons:
//   - Servers are colocated: ranks 0..K-1 are servers *and* workers (K <= N). Dedicated servers
//     (ranks that hold no data) are left out: they would change the data sampler's sharding.
//   - Partitions hold whole tensors, assigned greedily by size (largest tensor first, to the least
//     loaded server; ties to the lowest server), so a server's load is balanced to within one tensor
//     and every parameter's optimizer state lives in exactly one place - no ZeRO-style slicing.
//   - Push and pull are collectives (reduce-to-root, broadcast-from-root) on the same Communicator
//     as DDP, not point-to-point sends: every rank issues the same sequence, so the ordering rule of
//     communicator.h still holds and no message matching is needed. The cost of this choice: MPI's
//     and NCCL's reduce may use a tree or pipelined ring, so the bytes do not all funnel into the
//     server's link as a textbook PS's incast does (N * S/K bytes into one server). The measured
//     time is thus a lower bound for a send/recv PS; apps/whatif/model.h states the incast cost.
//   - Not overlapped: the push starts after backward ends (a synchronous baseline). Pushing
//     buckets as their gradients become ready is the reducer's trick, deliberately not repeated.
//   - Initial state: rank 0's parameters are broadcast at construction, as DDP does, so the
//     servers' partitions start from the same values on every rank.
//   - Two parameter groups, as the trainers' optimizers have (BERT: no weight decay on biases and
//     LayerNorm): with a `no_decay` rule a server runs a second optimizer, weight decay 0, over the
//     tensors of its partition that the rule names. Per-tensor updates, so the split changes nothing
//     else.
// Left out: dedicated servers, asynchronous (stale) updates, gradient compression, checkpointing
// the servers' optimizer state, LAMB's trust ratio across partitions (it is per tensor, so it works,
// but is untested here).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/measure/timeline.h"
#include "optim/optimizer.h"

namespace tandem::dist {

struct PsOptions {
  int servers = 1;                          // K: ranks 0..K-1 serve a partition each (1 <= K <= N)
  std::string optimizer = "sgd";            // make_optimizer's name: "sgd", "adamw" or "lamb"
  optim::OptimizerOptions optimizer_options;  // lr, momentum, weight decay, ... (optim/optimizer.h)
  // True for a parameter name that trains without weight decay (its own optimizer on the server,
  // weight decay 0); null: every parameter decays.
  std::function<bool(const std::string& name)> no_decay;
  // Push and pull send each partition in pieces of at most this many bytes (a multiple of 4; see
  // parameter_server.cpp for why 16 MiB). The values do not depend on it.
  size_t piece_bytes = size_t{16} << 20;
};

// Pure: the server of each tensor, from the tensors' sizes (elements). Greedy: tensors in order of
// decreasing size (ties: lower index first) each go to the server with the fewest elements so far
// (ties: lower server). Deterministic, so every rank computes the same partitions.
std::vector<int> assign_partitions(const std::vector<int64_t>& numels, int servers);

class ParameterServer {
 public:
  // `params`: the model's trainable parameters (same names, shapes and order on every rank; all
  // f32 on one device). `comm`: the communicator for that device. Collective: broadcasts rank 0's
  // parameters.
  ParameterServer(optim::NamedTensors params, Communicator& comm, PsOptions options = {});
  ~ParameterServer();

  // After backward on every rank: push, update on the servers, pull (see the file comment). A
  // parameter without a gradient pushes zeros. When `timeline` has a started step (DDP's forward
  // starts one), each push and pull is recorded on it as a "bucket", ready at the end of backward.
  void step(Timeline* timeline = nullptr);
  void set_lr(double lr);

  int servers() const { return static_cast<int>(parts_.size()); }
  bool is_server() const { return optimizer_ != nullptr; }
  const std::vector<int>& assignment() const { return server_of_; }  // per parameter, its server
  optim::Optimizer* optimizer() { return optimizer_.get(); }           // null on a rank that only works
  // The server's no-decay group (PsOptions::no_decay); null on a worker or without a rule.
  optim::Optimizer* no_decay_optimizer() { return no_decay_optimizer_.get(); }

 private:
  struct Partition {
    std::vector<size_t> params;  // indices into params_, in model order
    std::vector<int64_t> offsets;  // element offset of each in the flat buffers
    Tensor grads, values;        // flat f32 buffers on every rank: pushed gradients, pulled parameters
  };
  void pack_grads(Partition& p);
  void unpack_values(const Partition& p);

  optim::NamedTensors params_;
  Communicator& comm_;
  PsOptions options_;
  std::vector<int> server_of_;
  std::vector<Partition> parts_;
  std::unique_ptr<optim::Optimizer> optimizer_;  // this rank's partition; null unless rank < K
  std::unique_ptr<optim::Optimizer> no_decay_optimizer_;  // its tensors no_decay names; null without a rule
};

}  // namespace tandem::dist
