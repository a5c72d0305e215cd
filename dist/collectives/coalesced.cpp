// dist/collectives/coalesced.cpp: the grouped broadcast (see coalesced.h).
#include "dist/collectives/coalesced.h"

#include "core/ops/shape/shape.h"

namespace tandem::dist {

namespace {
// What a broadcast group shares: one flat buffer needs one dtype on one device.
struct GroupKey {
  DType dtype;
  Device device;
  bool operator==(const GroupKey&) const = default;
};
}  // namespace

int broadcast_coalesced(Communicator& comm, const std::vector<Tensor>& tensors, int root, const std::string& name) {
  // Groups in order of first appearance: every rank holds the same shapes and dtypes in the same
  // order (check_same_model), so every rank forms the same groups and issues the same broadcasts.
  std::vector<GroupKey> keys;
  std::vector<std::vector<Tensor>> groups;
  for (const Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    const GroupKey key{t.dtype(), t.device()};
    size_t g = 0;
    while (g < keys.size() && !(keys[g] == key)) ++g;
    if (g == keys.size()) keys.push_back(key), groups.emplace_back();
    groups[g].push_back(t.detach().view({t.numel()}));  // same storage, flat; not differentiable
  }
  // Pack, then start every group's broadcast before waiting for any. On a GPU the packing copies
  // run on the compute stream and NCCL's enqueue makes the comm stream wait for them (an event);
  // wait() makes the compute stream wait for the broadcast, so the unpacking copies below read the
  // received bytes - all stream-ordered, the host never blocks.
  std::vector<Tensor> flats(groups.size());
  std::vector<WorkPtr> works;
  for (size_t g = 0; g < groups.size(); ++g) {
    flats[g] = groups[g].size() == 1 ? groups[g][0] : ops::concat_channels(groups[g]);  // one: in place, no copy
    works.push_back(comm.broadcast(flats[g], root, name));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    works[g]->wait();
    if (groups[g].size() == 1) continue;
    int64_t off = 0;
    for (Tensor& t : groups[g]) t.copy_(flats[g].slice(off, off + t.numel())), off += t.numel();
  }
  return static_cast<int>(groups.size());
}

}  // namespace tandem::dist
