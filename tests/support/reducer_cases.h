// tests/support/reducer_cases.h: the reducer's test bodies on raw leaf tensors (no layers needed),
// run by tests/mpi_reducer.cpp (MPI, a process a rank) and tests/test_reducer.cpp (a thread a rank,
// dist/transport/comm_thread.h).
//
// Rank r's "loss" is sum_i p_i * x_i with x = (r + 1) * k, so d loss / d p = (r + 1) * k and the
// averaged gradient is k (n + 1) / 2 - exact in f32 for these small values. Every check_* function
// issues collectives on `c` and uses doctest CHECKs: call it from a TEST_CASE on every rank at once.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "dist/reducer.h"

namespace tandem::testing::reducer_cases {

struct Toy {
  std::vector<std::pair<std::string, Tensor>> params;  // p0 .. p11: 100 + 37 i elements of 0.5
  explicit Toy(int count = 12);
  float k(size_t param, int64_t j) const { return static_cast<float>((param + j) % 4 + 1); }
  // One backward over every parameter's contribution (roots y_i = p_i * x_i, seed gradient 1).
  // Parameters in `skip` take no part: they are "unused" in this backward.
  void backward(int rank, const std::vector<size_t>& skip = {});
  void zero_grad();
  void step(int rank) { zero_grad(), backward(rank); }  // one training step's gradient work
  // Gradient elements that differ from factor * k * (n + 1) / 2 (0 for `skip`) by more than tol (relative).
  int mismatches(int n, float factor = 1.0f, float tol = 0.0f, const std::vector<size_t>& skip = {}) const;
};

// Several buckets out of Toy's 12 small parameters (5 of them).
dist::ReducerOptions small_buckets();

// Averaged over the ranks, bucketed or not, overlap on or off, twice (pending counts reset);
// .grad a view into its bucket where its locator says; two timeline steps.
void check_averaged(dist::Communicator& c);
// Reducer::zero_grad: one memset per bucket, then backward copies in; same gradients as zeroing
// per parameter; a .grad replaced by set_grad is zeroed on its own.
void check_zero_grad(dist::Communicator& c);
// no_sync accumulates locally; the next synchronised backward averages the sum.
void check_no_sync(dist::Communicator& c);
// Unused parameters are named in the error (the reducer recovers), or zero with find_unused_parameters.
void check_unused(dist::Communicator& c);
// A destroyed reducer removes its hooks: reducers built in a loop leave none behind.
void check_hooks_removed(dist::Communicator& c);
// bf16 and f16 on the wire: within their rounding, half the bytes.
void check_compression(dist::Communicator& c);
// Every bucket's timeline has ready <= launch <= finish, and 0 <= overlap <= 1.
void check_timeline_order(dist::Communicator& c);

}  // namespace tandem::testing::reducer_cases
