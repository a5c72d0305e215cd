// dist/ddp.cpp: the model check, the initial broadcast and the per-forward (coalesced) buffer broadcast.
#include "dist/ddp.h"

#include <sstream>

#include "core/autograd.h"
#include "core/ops/shape/shape.h"
#include "core/profile.h"
#include "dist/extras/sync_batchnorm.h"

namespace tandem::dist {
namespace {

// One line per parameter/buffer: "parameter layer1.0.weight f32[64, 3, 3, 3]".
std::string signature(const Module& m) {
  std::string lines;
  for (auto& [name, t] : m.named_parameters())
    lines += "parameter " + name + " " + dtype_name(t.dtype()) + shape_str(t.shape()) + "\n";
  for (auto& [name, t] : m.named_buffers())
    lines += "buffer " + name + " " + dtype_name(t.dtype()) + shape_str(t.shape()) + "\n";
  return lines;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

std::vector<Tensor> values(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<Tensor> out;
  for (auto& [_, t] : named) out.push_back(t);
  return out;
}

}  // namespace

int broadcast_coalesced(Communicator& comm, const std::vector<Tensor>& tensors, int root, const std::string& name) {
  // Groups in order of first appearance: every rank holds the same shapes and dtypes in the same
  // order (check_same_model), so every rank forms the same groups and issues the same broadcasts.
  std::vector<BucketKey> keys;
  std::vector<std::vector<Tensor>> groups;
  for (const Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    const BucketKey key{t.dtype(), t.device()};
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

void check_same_model(Communicator& comm, const Module& m) {
  std::vector<std::string> all = all_gather_strings(comm, signature(m));
  const std::vector<std::string> ref = split_lines(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const std::vector<std::string> other = split_lines(all[r]);
    size_t i = 0;
    while (i < ref.size() && i < other.size() && ref[i] == other[i]) ++i;
    const std::string a = i < ref.size() ? ref[i] : "(nothing: its list ends here)";
    const std::string b = i < other.size() ? other[i] : "(nothing: its list ends here)";
    TANDEM_THROW("rank ", r, " built a different model than rank 0. First difference, entry #", i, ": rank 0 has '",
                 a, "', rank ", r, " has '", b, "'. Every rank must construct the same model (same arguments, "
                 "same order of registration) before wrapping it in DistributedDataParallel");
  }
}

DistributedDataParallel::DistributedDataParallel(ModulePtr module, Communicator& comm, DdpOptions options)
    : module_(std::move(module)), options_(options), comm_(comm) {
  TANDEM_CHECK(module_, "DistributedDataParallel got a null module");
  if (options_.sync_batchnorm) module_ = convert_sync_batchnorm(module_, comm_);
  check_same_model(comm_, *module_);  // first: any other collective could mismatch on a different model
  std::vector<WorkPtr> works;
  std::vector<std::pair<std::string, Tensor>> trainable;
  for (auto& [name, p] : module_->named_parameters()) {
    Tensor data = p.detach();  // same storage; the broadcast is not a differentiable op
    works.push_back(comm_.broadcast(data, 0, "broadcast parameters"));
    if (p.requires_grad()) trainable.emplace_back(name, p);
  }
  for (auto& w : works) w->wait();
  broadcast_coalesced(comm_, values(module_->named_buffers()), 0, "broadcast buffers");
  TANDEM_CHECK(!trainable.empty(), "DistributedDataParallel: the module has no parameter that requires grad");
  reducer_ = std::make_unique<Reducer>(std::move(trainable), comm_, options_.reducer);
}

void DistributedDataParallel::prepare_forward() {
  if (autograd::grad_mode_enabled()) reducer_->start_step();
  if (options_.broadcast_buffers && module_->is_training() && comm_.size() > 1) {
    profile::Range r("broadcast buffers");
    // One collective per dtype (BatchNorm: f32 statistics, i64 counters), not one per buffer: a
    // ResNet-50 has 159 buffers, and each collective costs a launch and a latency.
    buffer_collectives_ = broadcast_coalesced(comm_, values(module_->named_buffers()), 0, "broadcast buffers");
  }
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  prepare_forward();
  profile::Range r("forward");  // the step-level range, beside "backward" and "optimizer"
  return (*module_)(x);
}

}  // namespace tandem::dist
