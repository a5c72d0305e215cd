// dist/ddp.cpp: the wrap (model check, initial broadcast, reducer) and the per-forward buffer broadcast.
#include "dist/ddp.h"

#include "core/autograd.h"
#include "core/profile.h"
#include "dist/extras/sync_batchnorm.h"

namespace tandem::dist {
namespace {

std::vector<Tensor> values(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<Tensor> out;
  for (auto& [_, t] : named) out.push_back(t);
  return out;
}

}  // namespace

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

void DistributedDataParallel::rebuild_reducer(const ReducerOptions& options) {
  reducer_ = std::make_unique<Reducer>(reducer_->params(), comm_, options_.reducer = options);  // the old one's hooks go
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
