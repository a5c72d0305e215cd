// core/cuda/context.h: per-device CUDA state shared by all kernels (CUDA builds only).
//
// One compute stream per device: every op is enqueued on it, in program order, so ops never need
// host syncs between them. dist/ owns a separate communication stream and synchronises with this
// one through events only. The stream is created non-blocking so it never serialises with the
// legacy default stream that third-party code might use.
#pragma once
#include <cuda_runtime.h>

namespace tandem::cuda {

int current_device();
cudaStream_t compute_stream();           // of the current device
cudaStream_t compute_stream(int device);
// Blocks the host until the compute stream has drained (used by .item(), copies to CPU, timers).
void synchronize();

// Grid size for a grid-stride elementwise loop over n items.
inline unsigned grid_for(long long n, int block = 256) {
  long long g = (n + block - 1) / block;
  if (g > 65535LL * 16) g = 65535LL * 16;  // grid-stride loops cover the rest
  return static_cast<unsigned>(g < 1 ? 1 : g);
}

}  // namespace tandem::cuda
