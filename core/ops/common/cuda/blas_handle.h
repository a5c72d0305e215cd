// core/ops/common/cuda/blas_handle.h: per-device cuBLASLt handle and GEMM workspace (CUDA builds only).
//
// A cuBLASLt handle holds no stream (the stream is an argument of every cublasLtMatmul call), so
// one handle per device serves every thread. The workspace is a single persistent block per
// device: every GEMM runs on that device's compute stream, so consecutive GEMMs are ordered and
// can share it without any synchronisation.
#pragma once
#include <cublasLt.h>

#include <cstddef>

namespace tandem::cuda {

// 32 MiB: NVIDIA's cuBLAS documentation recommends 32 MiB of workspace on Hopper (sm_90), where
// the fastest kernels (split-K / stream-K reductions over big k, as in dW = dy^T x with k = batch
// tokens) need it; smaller workspaces make the heuristic fall back to slower kernels.
constexpr size_t kBlasWorkspaceBytes = 32ull << 20;

cublasLtHandle_t blaslt_handle();     // of the current device, created on first use
void* blas_workspace();               // kBlasWorkspaceBytes on the current device, created on first use

}  // namespace tandem::cuda
