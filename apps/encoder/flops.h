// apps/encoder/flops.h: model FLOPs of a BERT training step and the device peak they are divided by
// (MFU, model FLOPs utilisation: Chowdhery et al. 2022, PaLM, appendix B).
//
// Per token of a training step (forward + backward):
//   6 * N            N = all parameters (the tied decoder counted once): 2 FLOPs per multiply-add,
//                    x3 for forward, input gradient and weight gradient
//   + 12 * L * H * S the attention scores and the weighted sum (QK^T and AV: 2 * 2 * S * H per
//                    token per layer forward, x3 with backward), which no parameter accounts for
// This is the conventional count, so MFU compares across frameworks: apps/scripts/session_summary.py
// divides PyTorch's tokens/s by the same count and peak (pytorch_peer.py writes the same formula
// for its model, and the summary checks the two agree). It is not what tandem computes: embeddings
// are lookups, not GEMMs, and mlm_loss sends only the masked ~15 % of the tokens through the
// prediction head, so the actual work is smaller and MFU understates the hardware's use.
// bert_large at seq 128 (vocab 30522, 335,174,458 parameters): 2.049 GFLOP per token.
//
// The peak: the DENSE peak (no 2:4 sparsity) of the dtype the matmuls run in, as Megatron-LM and
// PaLM count it - an H100 SXM doing bf16 GEMMs is measured against 989.4 TFLOP/s, not against its
// f32 SIMT 66.9 (which once printed "MFU 371 %"). Which dtype (matmul_precision): --amp bf16 or
// fp16: the 16-bit tensor cores; f32 with BackendConfig::allow_tf32 (the default): TF32 tensor
// cores; f32 without it: the plain f32 (SIMT) peak.
// Per rank: --peak-tflops when given. Otherwise, on CUDA, the table in flops.cpp (NVIDIA's data
// sheets and architecture whitepapers, each row naming its source), matched on the device name
// cudaGetDeviceProperties reports; an unknown GPU gets 0 (MFU not shown) and a source saying to
// pass --peak-tflops. On the CPU, an estimate whatever the precision (16-bit tensors compute in f32
// there): clock (from /proc/cpuinfo) x f32 FLOPs per cycle per core (32 with AVX2+FMA: two 8-wide
// FMA units; 64 with AVX-512 on 512-bit units, but 32 on AMD Zen 4's 256-bit ones; 8 otherwise) x
// the BLAS threads of this rank (OPENBLAS_NUM_THREADS, else 1 per rank when several ranks share
// the machine's cores).
#pragma once
#include <cstdint>
#include <string>

#include "core/device.h"
#include "layers/transformer.h"  // defines: BertConfig

namespace tandem::apps::encoder {

// Model FLOPs per token of a training step (see above).
double train_flops_per_token(const BertConfig& cfg, int64_t parameters, int64_t seq_len);

// The dtype the step's matmuls run in.
enum class MatmulPrecision { F32, TF32, BF16, F16 };
// amp: "off" | "bf16" | "fp16" (the trainer's --amp); allow_tf32: BackendConfig::allow_tf32.
MatmulPrecision matmul_precision(const std::string& amp, bool allow_tf32);
const char* matmul_precision_name(MatmulPrecision p);  // "f32", "tf32", "bf16", "fp16"

struct PeakFlops {
  double flops = 0;     // per second, one rank; 0: unknown
  std::string source;   // what it is and where it comes from, for the start-up line and the summary
};
// The dense peak of the GPU called `device_name` (cudaDeviceProp::name, e.g. "NVIDIA H100 80GB
// HBM3") for precision p, from the table; flops 0 and the reason when the GPU is not in it or has
// no such tensor cores (a V100 and bf16).
PeakFlops gpu_peak(const std::string& device_name, MatmulPrecision p);
// ranks_per_node: processes sharing this machine's cores (the CPU estimate).
PeakFlops peak_flops(Device dev, double peak_tflops_flag, int ranks_per_node, MatmulPrecision p);

// Model FLOPs utilisation of one rank: its tokens/s x FLOPs per token / its peak (0: peak unknown).
double mfu(double tokens_per_s_per_rank, double flops_per_token, double peak_flops);

}  // namespace tandem::apps::encoder
