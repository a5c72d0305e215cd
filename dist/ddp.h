// dist/ddp.h: DistributedDataParallel - one model replica per rank, gradients averaged.
//
// Wrapping a Module:
//   1. checks that every rank built the same model (collectives/same_model.h), before any other
//      collective: a different model would make the next collectives mismatch;
//   2. broadcasts parameters and buffers from rank 0, so every replica starts identical;
//   3. builds a Reducer (reducer.h) over the parameters that require grad.
// Each training forward first broadcasts rank 0's buffers (BatchNorm running statistics), as
// PyTorch's broadcast_buffers does, so evaluation and checkpoints agree on every rank; the buffers
// of one dtype travel as one flat broadcast (collectives/coalesced.h, PyTorch's _broadcast_coalesced).
// With sync_batchnorm the module is converted first (extras/sync_batchnorm.h; module() returns it).
// Every collective goes through the communicator passed in (an app gets the world's from
// dist::comm_for(device), a test may pass an in-process one, transport/comm_thread.h); ZeRO and
// SyncBatchNorm use the same one, so all of a step's collectives keep one order.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/profile.h"
#include "dist/reducer.h"
#include "dist/collectives/coalesced.h"   // defines: broadcast_coalesced (the buffers' broadcast)
#include "dist/collectives/same_model.h"  // defines: check_same_model (the first collective)
#include "layers/module.h"

namespace tandem::dist {

struct DdpOptions {
  ReducerOptions reducer;          // buckets, overlap, compression, unused parameters (reducer.h)
  bool broadcast_buffers = true;   // rank 0's buffers to every rank before each training forward
  bool sync_batchnorm = false;     // convert_sync_batchnorm first: BN statistics over all ranks
};

class DistributedDataParallel {
 public:
  // The module must already be on the device whose tensors `comm` takes (a GPU for NCCL), and
  // `comm` must outlive this. Collective: every rank of `comm` constructs its DDP together.
  DistributedDataParallel(ModulePtr module, Communicator& comm, DdpOptions options = {});

  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  // forward() for a module that takes more than one tensor (BERT: ids, mask, token types, labels):
  // does forward()'s work (prepare_forward) and returns f(module()), inside the "forward" profile range:
  //   Tensor loss = ddp.forward_with([&](Module& m) { return bert.mlm_loss(ids, mask, types, labels); });
  // f must run the wrapped module's forward exactly once (the reducer counts one backward per step).
  // f runs inside the module's forward hooks (Module::call), as forward() runs it (ZeRO-3's root unit).
  template <class F>
  decltype(auto) forward_with(F&& f) {
    prepare_forward();
    profile::Range r("forward");
    return module_->call([&]() -> decltype(auto) { return std::forward<F>(f)(*module_); });
  }
  // What every forward does first: starts the reducer's step (when grad mode is on) and broadcasts
  // rank 0's buffers (training mode, broadcast_buffers).
  void prepare_forward();

  // Gradient accumulation. RAII: while alive, backward only accumulates locally; the first backward
  // after it averages the accumulated sum.
  class NoSync {
   public:
    explicit NoSync(Reducer& r) : r_(&r), prev_(r.sync()) { r.set_sync(false); }
    NoSync(NoSync&& o) noexcept : r_(std::exchange(o.r_, nullptr)), prev_(o.prev_) {}  // no copies, no assignment
    ~NoSync() { if (r_) r_->set_sync(prev_); }

   private:
    Reducer* r_;
    bool prev_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*reducer_); }

  Module& module() { return *module_; }
  Reducer& reducer() { return *reducer_; }
  // A new reducer, same parameters, no collective; between steps (ZeRO-3 regroups buckets, zero3.h).
  void rebuild_reducer(const ReducerOptions& options);
  Communicator& communicator() const { return comm_; }
  Timeline& timeline() { return reducer_->timeline(); }
  // Collectives issued by the last training forward's buffer broadcast: one per (dtype, device)
  // of the buffers (broadcast_coalesced), 0 when nothing was broadcast.
  int buffer_collectives() const { return buffer_collectives_; }

 private:
  ModulePtr module_;
  DdpOptions options_;
  Communicator& comm_;
  std::unique_ptr<Reducer> reducer_;
  int buffer_collectives_ = 0;
};

}  // namespace tandem::dist
