// dist/measure/memory_ledger.h: per-rank memory - the ZeRO paper's prediction beside what was allocated.
//
// Ψ parameters, N ranks, bytes per rank (Rajbhandari et al., "ZeRO", 2020, section 5):
//   mixed precision (16-bit params and grads, f32 master weights + Adam's two f32 moments, K = 12):
//     DDP    2Ψ + 2Ψ   + 12Ψ          = 16Ψ
//     ZeRO-1 2Ψ + 2Ψ   + 12Ψ/N        = 4Ψ + 12Ψ/N
//     ZeRO-2 2Ψ + 2Ψ/N + 12Ψ/N        = 2Ψ + 14Ψ/N
//     ZeRO-3 2Ψ/N + 2Ψ/N + 12Ψ/N      = 16Ψ/N             + the gathered units (below)
//   beyond the paper, tandem's AMP also keeps an f32 gradient per master (optim/amp.h: the fused
//   unscale writes it, the optimizer reads it), 4Ψ (DDP) or 4Ψ/N (ZeRO): the ledger's own term
//   master_grads, in model_state() and after the formula ("... (+ 4Ψ/N f32 master grads)"), so
//   predicted and measured compare like for like;
//   f32 (no AMP: the parameters are the master weights, K = 8 for Adam, 4 for SGD with momentum):
//     DDP    4Ψ + 4Ψ   + KΨ           (Adam: 16Ψ)
//     ZeRO-1 4Ψ + 4Ψ   + KΨ/N         (Adam: 8Ψ + 8Ψ/N)
//     ZeRO-2 4Ψ + 4Ψ/N + KΨ/N         (Adam: 4Ψ + 12Ψ/N)
//     ZeRO-3 4Ψ/N + 4Ψ/N + KΨ/N       (Adam: 16Ψ/N)      + the gathered units (below)
// ZeRO-3's gathered working set (dist/zero3.h) is not model state - between steps nothing is
// gathered - but it is what a step adds on top: the root and pinned units, gathered for the whole
// step, and the prefetch + 1 largest other units (zero3_working_set, dist/zero3.h), 2 or 4 bytes each.
// The ledger keeps it apart (`gathered`), beside the transient gradients, and both bound the peak.
// The ledger uses exactly these, with Ψ/N replaced by the rank's real shard (dist/shard_layout.h: each
// bucket padded to N aligned chunks). Beside them it predicts the transient gradient buffers, which
// set the peak of a step when activations are small (VGG-16 on small images):
//   DDP, ZeRO-1: autograd's fresh gradient of a layer before it is copied into its bucket - at
//                most the largest bucket. (ZeRO-1's parameter gather lands in the spent gradient
//                buckets, or straight in a lone parameter, so it adds less than that.)
//   ZeRO-2, 3:   the largest gradient, handed over as its own bucket (a parameter of a bucket's
//                size is a bucket alone; under ZeRO-3 a unit's), plus one launched bucket still
//                reduce-scattering (ReducerOptions::scatter_in_flight = 1): the two largest buckets.
// Mixed precision on the CPU adds f32 copies (core/ops/common/cpu/widen.h: a 16-bit CPU kernel computes on
// f32 copies of its tensor arguments), LedgerOptions::cpu_widen, with P the largest parameter:
//   backward:  the largest weight's gradient GEMM writes an f32 result (4P) before it is rounded
//              into its fresh 16-bit gradient, which the terms above already count: + 4P.
//   averaging: DDP and ZeRO-1 (N > 1) divide each all-reduced 16-bit bucket by N in place
//              (AllReduceBucket::average's scale_), widened as input and as output: 8 x the
//              largest bucket once backward's buffers are gone, so the transient is the larger.
//   (The forward's f32 copy of the largest weight, 4P, is smaller than either.) On a GPU the
//   kernels read 16-bit directly and none of this exists.
// What the ledger measured on VGG-16 (DDP, ZeRO-1/2, f32 and bf16, N = 1, 2, 4), and why ZeRO-2's
// peak stays above half of DDP's there: dist/README.md, "Memory ledger".
// Tensor parallelism (dist/tp/): nothing new to count - the Step's parameters are this rank's TP shards,
// so Ψ above is their count (the split layers at 1/T) and N the data-parallel ranks it averages over.
// Measured: the allocator's current bytes with the model state live (after a step, between steps)
// and its peak during the steps; the difference between peak and that is activations and workspace
// (and the transient buffers), which the ZeRO formulas leave out.
#pragma once
#include <cstdint>
#include <string>

namespace tandem::dist {


struct LedgerOptions {
  int64_t params = 0;            // Ψ: trainable parameter elements
  int64_t shard_params = -1;     // this rank's shard elements (padding included); -1: Ψ / N
  int world = 1;                 // N
  int stage = 0;                 // 0 (DDP), 1, 2, 3
  bool mixed = false;            // AMP: 16-bit parameters and gradients, f32 master weights
  int state_bytes = 8;           // f32 optimizer state per parameter: Adam/LAMB 8, SGD+momentum 4, SGD 0
  int64_t largest_bucket = 0;    // elements of the largest gradient bucket (transient terms)
  int64_t next_bucket = 0;       // elements of the second largest (ZeRO-2's bucket in flight)
  int64_t largest_param = 0;     // elements of the largest parameter (the CPU widening term)
  bool cpu_widen = false;        // CPU parameters: with `mixed`, 16-bit kernels work on f32 copies (above)
  int64_t gathered = 0;          // ZeRO-3: elements gathered at once (zero3_working_set, dist/zero3.h)
  int tp = 1;                    // tensor parallelism: T. Ψ is then this rank's elements - the split
                                 // layers' 1/T shards and the replicated rest - and N the data-parallel
                                 // ranks (the Step's communicator); the formula says so.
};

struct MemoryLedger {
  // Predicted bytes per rank.
  double params = 0, grads = 0, optimizer = 0, masters = 0;  // the ZeRO paper's model state
  double transient = 0;  // gradient buffers and (CPU AMP) f32 copies, see above
  double gathered = 0;   // ZeRO-3's gathered units during a step, see above
  std::string formula;                                        // e.g. "4Ψ + 4Ψ/N + 8Ψ/N"
  double model_state() const { return params + grads + optimizer + masters + master_grads; }
  double master_grads = 0;  // AMP's f32 master gradients (see above)
  // Measured (allocator, this rank's device); -1: not measured yet.
  int64_t measured_state = -1;  // bytes held by the model state between steps
  int64_t measured_peak = -1;   // peak bytes of the run's steps (model state + activations + workspace)
  // Lines for the start-up print and the summary.
  std::string str() const;
};

MemoryLedger predict_memory(const LedgerOptions& o);

}  // namespace tandem::dist
