// core/ops/graph_scalars/increment.h: t += 1 on an i64 tensor, on the tensor's own device.
//
// For counters that must keep counting inside a captured CUDA graph (BatchNorm's
// num_batches_tracked, layers/norm.cpp): the add runs on the device (a kernel on the compute
// stream), so no host value is frozen into the graph and the host never waits. Not recorded by
// autograd.
#pragma once
#include "core/tensor.h"

namespace tandem::ops {

void increment_(Tensor& t);

}  // namespace tandem::ops
