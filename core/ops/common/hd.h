// core/ops/common/hd.h: TANDEM_HD, the mark of a function that both backends compile.
//
// __host__ __device__ (and force-inlined) under nvcc, plain inline otherwise, so one header of math
// (the functors, rng.h) serves the CPU loops and the CUDA kernels alike.
#pragma once

#ifdef __CUDACC__
#define TANDEM_HD __host__ __device__ __forceinline__
#else
#define TANDEM_HD inline
#endif
