// dist/ddp.cpp: the model check, the initial broadcast and the per-forward buffer broadcast.
#include "dist/ddp.h"

#include <sstream>

#include "core/autograd.h"
#include "core/profile.h"
#include "dist/bootstrap.h"
#include "dist/sync_batchnorm.h"

namespace tandem::dist {
namespace {

// One line per parameter/buffer: "param layer1.0.weight f32[64, 3, 3, 3]".
std::vector<std::string> signature(const Module& m) {
  std::vector<std::string> lines;
  for (auto& [name, t] : m.named_parameters())
    lines.push_back("parameter " + name + " " + dtype_name(t.dtype()) + shape_str(t.shape()));
  for (auto& [name, t] : m.named_buffers())
    lines.push_back("buffer " + name + " " + dtype_name(t.dtype()) + shape_str(t.shape()));
  return lines;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

void broadcast_all(const std::vector<std::pair<std::string, Tensor>>& tensors, const char* what) {
  std::vector<WorkPtr> works;
  for (auto& [name, t] : tensors) {
    Tensor data = t.detach();  // same storage; the broadcast is not a differentiable op
    works.push_back(comm_for(t.device()).broadcast(data, 0, std::string("broadcast ") + what));
  }
  for (auto& w : works) w->wait();
}

}  // namespace

void check_same_model(const Module& m) {
  std::string mine;
  for (const std::string& line : signature(m)) mine += line + "\n";
  std::vector<std::string> all = all_gather_strings(mine);
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

DistributedDataParallel::DistributedDataParallel(ModulePtr module, DdpOptions options)
    : module_(std::move(module)), options_(options) {
  TANDEM_CHECK(module_, "DistributedDataParallel got a null module");
  if (options_.sync_batchnorm) module_ = convert_sync_batchnorm(module_);
  check_same_model(*module_);  // first: any other collective could mismatch on a different model
  broadcast_all(module_->named_parameters(), "parameters");
  broadcast_all(module_->named_buffers(), "buffers");
  std::vector<std::pair<std::string, Tensor>> trainable;
  for (auto& [name, p] : module_->named_parameters())
    if (p.requires_grad()) trainable.emplace_back(name, p);
  TANDEM_CHECK(!trainable.empty(), "DistributedDataParallel: the module has no parameter that requires grad");
  comm_ = &comm_for(trainable.front().second.device());
  reducer_ = std::make_unique<Reducer>(std::move(trainable), *comm_, options_.reducer);
}

void DistributedDataParallel::prepare_forward() {
  if (autograd::grad_mode_enabled()) reducer_->start_step();
  if (options_.broadcast_buffers && module_->is_training() && comm_->size() > 1) {
    profile::Range r("broadcast buffers");
    broadcast_all(module_->named_buffers(), "buffers");
  }
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  prepare_forward();
  profile::Range r("forward");  // the step-level range, beside "backward" and "optimizer"
  return (*module_)(x);
}

}  // namespace tandem::dist
