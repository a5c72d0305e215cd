// tests/support/collective_checks.h: one body per collective, run on CPU tensors by
// tests/mpi_collectives.cpp and on GPU tensors by tests/mpi_gpu_collectives.cpp.
//
// Each function checks `c` on tensors on `device` against the closed forms of
// tests/support/collective_values.h (rank r holds (r + 1) * k(i)), with doctest CHECKs, so it must
// be called from inside a TEST_CASE, on every rank. Values are exact in f32, f16 and bf16, so
// results are compared for equality, with one exception: an average may be computed by
// multiplying with 1/n (NCCL; MPI's f32 path), inexact when n is not a power of two, so then it
// gets one rounding of the dtype (2^-8 relative covers bf16); ctest runs n = 1, 2 and 4.
#pragma once
#include "core/device.h"
#include "dist/communicator.h"

namespace tandem::testing {

// Sum and average, every dtype, odd sizes and one of 2^18 + 3 elements (several NCCL chunks, 1 MiB
// of host staging); results stay on `device`.
void check_all_reduce(dist::Communicator& c, Device device);
// A view inside a larger buffer is reduced in place and its neighbours are left alone (DDP's
// gradients are views into flat buckets).
void check_all_reduce_view(dist::Communicator& c, Device device);
// The hand-off in and out: a kernel writes the input right before the collective, another reads
// the result right after wait().
void check_stream_handoff(dist::Communicator& c, Device device);
void check_reduce_scatter(dist::Communicator& c, Device device);  // rank r gets chunk r of the sum
void check_all_gather(dist::Communicator& c, Device device);      // chunk q is rank q's input
void check_broadcast_and_barrier(dist::Communicator& c, Device device);
// Wrong sizes, a non-float reduction and (NCCL) a tensor on another device throw before anything
// is sent, and the ranks stay in step afterwards.
void check_refusals(dist::Communicator& c, Device device);

}  // namespace tandem::testing
