// tests/mpi_gpu_ddp.cpp: DistributedDataParallel with the model and data on the GPU, against one
// process on the full batch (the experiment of tests/support/ddp_fixture.h, on world().device).
//
// Gradients travel over NCCL when each rank has its own GPU (ctest's _np1 entry: NCCL with one
// rank), over MPI through host memory when ranks share a GPU (_np2/_np4 on a one-GPU machine) or
// TANDEM_HOST_STAGING=1 (_np2_staged). Exits 77 on every rank without a GPU.
//
// Tolerances (norm-wise: per parameter tensor, max|ddp - ref| / max|ref|; see ddp_fixture.h):
//  - TF32 off, 1e-5. Every product and sum is then f32 (cuBLASLt COMPUTE_32F; cuDNN engines with
//    TENSOR_CORE / DOWN_CONVERT_INPUTS notes are skipped). The two sides differ only in summation
//    order: batch b vs N*b are different problems, so cuDNN / cuBLASLt may pick different
//    algorithms (split-K, Winograd, FFT), whose error is bounded relative to the terms summed - a
//    few 1e-7 for GEMM orderings, up to ~1e-6 for f32 Winograd. The parameters move by 3 steps x
//    lr 0.1 x gradient, and this model's gradients are at most 2.5x its parameter scale (measured
//    on the CPU), so the parameters differ by <= 3 x 0.1 x 2.5 x 1e-6 ~ 8e-7 of their scale: 1e-5
//    leaves 10x headroom (the CPU run of this experiment measures ~1e-7), while a real bug (no
//    averaging, a stale bucket, a skipped broadcast) is of the size of the whole update, ~0.3.
//    Element-wise relative error would not do on the GPU: a near-zero parameter's error is set by
//    its gradient's scale, and Winograd's error by the inputs' scale, not by the result's.
//  - TF32 on (the default), 1e-3. TF32 keeps 10 significand bits, so a product's inputs are off by
//    <= 2^-11 relative (2^-10 for kernels that truncate). Most of that rounding is the same on both
//    sides (same inputs), but even if the two sides' kernels rounded independently, the gradients
//    would differ by <= ~2^-10 of their scale and the parameters by <= 3 x 0.1 x 2.5 x 2^-10 ~ 7e-4
//    of theirs: bound 1e-3.
//  - Ranks must agree bit for bit in every case: each applies the same averaged bytes with the same
//    kernels on the same shapes.
#include <doctest/doctest.h>

#include <string>

#include "core/backend.h"
#include "core/ops/matmul/matmul.h"
#include "dist/transport/bootstrap.h"
#include "dist/ddp.h"
#include "tests/support/ddp_fixture.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::testing::ddp_fixture;

namespace {
// Sets BackendConfig::allow_tf32 for one scope and restores the previous settings.
struct Tf32Scope {
  BackendScope scope;
  explicit Tf32Scope(bool on) : scope(&BackendConfig::allow_tf32, on) {}
};
Communicator& comm() { return comm_for(world().device); }  // NCCL, or MPI with host staging

}  // namespace

TEST_CASE("GPU, TF32 off: N ranks x batch b == 1 process x batch N*b to 1e-5; ranks bit-identical") {
  Tf32Scope tf32(false);
  check_equivalence_grid(comm(), world().device, 1e-5);  // the grid of tests/mpi_ddp.cpp, norm-wise
}

TEST_CASE("GPU, TF32 on (default): equivalence to 1e-3; ranks still bit-identical") {
  Tf32Scope tf32(true);
  ReducerOptions ro;
  ro.bucketing = {256, 1024};
  check_equivalence(comm(), ro, world().device, 1e-3);
}

TEST_CASE("GPU, bf16 gradient compression: lossy on the wire, ranks still bit-identical") {
  // The precision bound of compression is checked on the CPU (tests/mpi_ddp.cpp) for the same
  // reducer code; here 5e-2 is a sanity bound: it catches garbage (a gradient not divided by N,
  // 16-bit bytes read as f32) while bf16's 2^-8 roundings over 3 steps stay far below it (the CPU
  // run of this experiment measures 8e-4 with 4 ranks).
  Tf32Scope tf32(false);
  ReducerOptions ro;
  ro.bucketing = {256, 1024};
  ro.compression = Compression::BF16;
  Trained t = train_ddp_and_reference(comm(), ro, world().device);
  CHECK(on_device(*t.model, world().device));
  CHECK(bit_identical(comm(), *t.model));
  const double diff = max_tensor_rel_diff(*t.model, *t.ref);
  if (world().rank == 0) MESSAGE("bf16 compression: max norm-wise diff ", diff, " (bound 5e-2)");
  CHECK(diff > 0);  // the wire really was 16-bit
  CHECK(diff <= 5e-2);
}
