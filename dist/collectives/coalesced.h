// dist/collectives/coalesced.h: one broadcast per dtype instead of one per tensor.
//
// DDP broadcasts rank 0's buffers before every training forward (dist/ddp.h). A ResNet-50 has 159
// buffers; a collective per buffer would pay a launch and a latency each. Grouped by (dtype,
// device), packed into one flat buffer, broadcast, unpacked: BatchNorm's f32 statistics and
// i64 counters cost two collectives (PyTorch's _broadcast_coalesced).
#pragma once
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace tandem::dist {

// Broadcasts `tensors` from `root` with one collective per (dtype, device): each group is packed
// into one flat buffer, broadcast and unpacked (a group of one tensor is broadcast in place).
// Every rank must pass the same shapes and dtypes in the same order. Returns the number of
// collectives issued. DDP uses it for buffers; exposed for tests and for tools.
int broadcast_coalesced(Communicator& comm, const std::vector<Tensor>& tensors, int root, const std::string& name);

}  // namespace tandem::dist
