// apps/encoder/flops.h: model FLOPs of a BERT training step and the device peak they are divided by
// (MFU, model FLOPs utilisation: Chowdhery et al. 2022, PaLM, appendix B).
//
// Per token of a training step (forward + backward):
//   6 * N            N = all parameters (the tied decoder counted once): 2 FLOPs per multiply-add,
//                    x3 for forward, input gradient and weight gradient
//   + 12 * L * H * S the attention scores and the weighted sum (QK^T and AV: 2 * 2 * S * H per
//                    token per layer forward, x3 with backward), which no parameter accounts for
// This is the conventional count, so MFU compares across frameworks. It is not what tandem computes:
// embeddings are lookups, not GEMMs, and mlm_loss sends only the masked ~15 % of the tokens through
// the prediction head, so the actual work is smaller and MFU understates the hardware's use.
//
// Peak per rank: --peak-tflops when given. Otherwise, on CUDA, the device's dense peak for the
// precision used (f32 without tensor cores: tandem's f32 GEMMs keep TF32 off), from a short table
// of known GPUs (NVIDIA's data sheets), or 0 (MFU not shown) for others. On the CPU, an estimate:
// clock (from /proc/cpuinfo) x f32 FLOPs per cycle per core (32 with AVX2+FMA: two 8-wide FMA
// units; 64 with AVX-512 on 512-bit units, but 32 on AMD Zen 4's 256-bit ones; 8 otherwise) x the BLAS threads of this rank (OPENBLAS_NUM_THREADS, else
// 1 per rank when several ranks share the machine's cores).
#pragma once
#include <cstdint>
#include <string>

#include "core/device.h"
#include "layers/transformer.h"  // defines: BertConfig

namespace tandem::apps::encoder {

// Model FLOPs per token of a training step (see above).
double train_flops_per_token(const BertConfig& cfg, int64_t parameters, int64_t seq_len);

struct PeakFlops {
  double flops = 0;     // per second, one rank; 0: unknown
  std::string source;   // how it was obtained, for the summary ("--peak-tflops", "H100 f32", "cpu estimate ...")
};
// ranks_per_node: processes sharing this machine's cores.
PeakFlops peak_flops(Device dev, double peak_tflops_flag, int ranks_per_node);

}  // namespace tandem::apps::encoder
