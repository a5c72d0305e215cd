// dist/ddp.h: DistributedDataParallel - one model replica per rank, gradients averaged.
//
// Wrapping a Module:
//   1. checks that every rank built the same model: each rank's list of parameter and buffer
//      names, shapes and dtypes is gathered (before any other collective, since a different model
//      would make the next collectives mismatch), and every rank throws the same error naming the
//      first difference - no rank hangs;
//   2. broadcasts parameters and buffers from rank 0, so every replica starts identical;
//   3. builds a Reducer (reducer.h) over the parameters that require grad.
// Each training forward first broadcasts rank 0's buffers (BatchNorm running statistics), as
// PyTorch's broadcast_buffers does, so evaluation and checkpoints agree on every rank.
// With sync_batchnorm the module is converted first (sync_batchnorm.h; module() returns it).
// Gradient accumulation: backward calls inside a no_sync() scope only accumulate locally; the
// first backward after it averages the accumulated sum.
// Models with several inputs (BERT: ids, attention mask, token types, labels) use forward_with(f):
// the same per-forward work as forward(x), then f(module()) computes whatever the step needs.
#pragma once
#include <memory>
#include <utility>

#include "core/profile.h"
#include "dist/reducer.h"
#include "layers/module.h"

namespace tandem::dist {

struct DdpOptions {
  ReducerOptions reducer;          // buckets, overlap, compression, unused parameters (reducer.h)
  bool broadcast_buffers = true;   // rank 0's buffers to every rank before each training forward
  bool sync_batchnorm = false;     // convert_sync_batchnorm first: BN statistics over all ranks
};

class DistributedDataParallel {
 public:
  // dist::init() must have run. The module must already be on its device (world().device).
  explicit DistributedDataParallel(ModulePtr module, DdpOptions options = {});

  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  // forward() for a module that takes more than one tensor: does forward()'s work before the module
  // runs (prepare_forward) and returns f(module()), called inside the "forward" profile range:
  //   Tensor loss = ddp.forward_with([&](Module& m) { return bert.mlm_loss(ids, mask, types, labels); });
  // f must run the wrapped module's forward exactly once (the reducer counts one backward per step).
  template <class F>
  decltype(auto) forward_with(F&& f) {
    prepare_forward();
    profile::Range r("forward");
    return std::forward<F>(f)(*module_);
  }
  // What every forward does first: starts the reducer's step (when grad mode is on) and broadcasts
  // rank 0's buffers (training mode, broadcast_buffers).
  void prepare_forward();

  // RAII: while alive, backward does not communicate (gradient accumulation).
  class NoSync {
   public:
    explicit NoSync(Reducer& r) : r_(&r), prev_(r.sync()) { r.set_sync(false); }
    ~NoSync() { if (r_) r_->set_sync(prev_); }
    NoSync(NoSync&& o) noexcept : r_(o.r_), prev_(o.prev_) { o.r_ = nullptr; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;

   private:
    Reducer* r_;
    bool prev_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*reducer_); }

  Module& module() { return *module_; }
  Reducer& reducer() { return *reducer_; }
  Timeline& timeline() { return reducer_->timeline(); }

 private:
  ModulePtr module_;
  DdpOptions options_;
  Communicator* comm_;
  std::unique_ptr<Reducer> reducer_;
};

// Throws on every rank, naming the first difference, unless all ranks hold the same parameter and
// buffer names, shapes and dtypes. Exposed for tests and for tools that wrap models differently.
void check_same_model(const Module& m);

}  // namespace tandem::dist
