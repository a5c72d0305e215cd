// apps/trainer/step/bn_stats.cpp: averaging or broadcasting BatchNorm statistics (see bn_stats.h).
#include "apps/trainer/step/bn_stats.h"

#include <map>
#include <string>
#include <vector>

#include "core/autograd.h"                     // defines: NoGradGuard
#include "core/ops/elementwise/elementwise.h"  // defines: scale_
#include "dist/collectives/coalesced.h"          // defines: broadcast_coalesced

namespace tandem::trainer {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

int sync_bn_statistics(Module& model, dist::Communicator& comm, BnSync how) {
  std::vector<Tensor> stats;  // every rank lists them in the same (registration) order
  for (const auto& [name, b] : model.named_buffers())
    if (ends_with(name, "running_mean") || ends_with(name, "running_var")) stats.push_back(b);
  if (stats.empty() || comm.size() == 1) return 0;
  if (how == BnSync::FromRank0) {
    dist::broadcast_coalesced(comm, stats, 0, "bn statistics from rank 0");
    return static_cast<int>(stats.size());
  }
  // One flat buffer per dtype (f32 in every model here; f64 in gradient-check builds): one
  // all-reduce for all of a ResNet-50's 106 statistics instead of 106.
  autograd::NoGradGuard ng;
  std::map<DType, std::vector<Tensor>> by_dtype;
  for (const Tensor& t : stats) by_dtype[t.dtype()].push_back(t);
  for (auto& [dtype, group] : by_dtype) {
    int64_t n = 0;
    for (const Tensor& t : group) n += t.numel();
    Tensor flat = Tensor::empty({n}, dtype, group.front().device());
    int64_t at = 0;
    for (const Tensor& t : group) flat.slice(at, at + t.numel()).copy_(t.view({t.numel()})), at += t.numel();
    comm.all_reduce(flat, dist::ReduceOp::Sum, "bn statistics average")->wait();
    ops::scale_(flat, 1.0f / static_cast<float>(comm.size()));
    at = 0;
    for (Tensor t : group) t.view({t.numel()}).copy_(flat.slice(at, at + t.numel())), at += t.numel();
  }
  return static_cast<int>(stats.size());
}

}  // namespace tandem::trainer
