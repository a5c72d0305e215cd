// dist/communicator.h: collective operations as asynchronous work handles.
//
// A Communicator connects the same process on every rank. Each call *starts* a collective and
// returns a Work; Work::wait() orders the caller's next operations after it. The backends live in
// transport/: MPI (comm_mpi.cpp: CPU tensors, and GPU tensors staged through host memory, on a
// communication thread), NCCL (comm_nccl.cpp: GPU tensors on a communication stream; wait() does
// not block the host, it makes the compute stream wait) and threads (comm_thread.h: N ranks in one
// process, CPU tensors, for tests). Each file says why it works the way it does.
// Everything in dist/ that communicates takes a Communicator& (DDP, ZeRO, SyncBatchNorm, ...);
// only the bootstrap (transport/bootstrap.h, dist::comm_for) knows which one a process has.
//
// Rules every caller must keep (they are what makes collectives match across ranks):
//   - every rank issues the same collectives, in the same order, with the same sizes and dtypes;
//   - a tensor handed to a collective is not touched until its Work was waited for.
// Supported dtypes: f32, f16 and bf16 for reductions (16-bit sums are accumulated in f32 per
// pairwise step and rounded back, as NCCL does); any dtype for broadcast and all_gather.
// ReduceOp::Avg is the sum divided by the world size.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tandem::dist {

enum class ReduceOp { Sum, Avg };

// A moment on the timeline that a communicator's collectives run on: the host's steady clock for
// MPI, a CUDA event on a stream for NCCL. Comparing two marks of the same communicator gives a
// duration that means the same thing on both backends.
class Mark {
 public:
  virtual ~Mark() = default;
  // Microseconds from `origin` to this mark. A GPU mark waits for the GPU to reach both marks, so
  // call this when reporting, not in the training loop's hot path.
  virtual double us_since(const Mark& origin) const = 0;
  // True once the timeline has passed this mark, so us_since() would not wait (never blocks: a
  // CUDA event is asked with cudaEventQuery). Host marks are always complete.
  virtual bool complete() const { return true; }
};
using MarkPtr = std::shared_ptr<Mark>;

class Work {
 public:
  virtual ~Work() = default;
  // MPI: blocks until the communication thread finished the collective (rethrows its error).
  // NCCL: makes the compute stream wait for the collective; returns at once.
  virtual void wait() = 0;
  // True once the collective has finished (never blocks).
  virtual bool done() = 0;
  // When the collective started and finished on its timeline. Valid after wait().
  virtual MarkPtr started() const = 0;
  virtual MarkPtr finished() const = 0;
};
using WorkPtr = std::shared_ptr<Work>;

// The members of a split, as the parent's ranks in the new communicator's rank order (computed
// once, in Communicator::split, from the gathered colours and keys; the same on each member).
struct SplitPlan {
  int color = 0;
  long long index = 0;       // the parent's splits so far, this one included (from 1)
  std::vector<int> members;  // members[new rank] = rank in the parent
  int new_rank = 0;          // this rank's place in members
};

// The collectives are non-virtual: each checks its arguments here, once for every backend, then
// starts the backend's do_* (the non-virtual interface idiom). Backends check only what is theirs
// (NCCL: the tensor is on its GPU; MPI: a GPU tensor needs host staging).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "mpi", "mpi+host-staging", "nccl", "threads"
  // Where this communicator's own small tensors live (collectives/strings.h, Zero::sum_reduce): NCCL's
  // GPU; the CPU for MPI (host staging or not) and threads.
  virtual Device device() const { return Device::cpu(); }

  // `name` labels the collective in NVTX ranges and watchdog messages ("allreduce bucket 3").
  // In place: t becomes the reduction over ranks.
  WorkPtr all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum, const std::string& name = "all_reduce") {
    check_reducible(t, name);
    return do_all_reduce(t, op, name);
  }
  // in.numel() == size() * out.numel(); rank r receives the reduction of chunk r.
  WorkPtr reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::Sum,
                         const std::string& name = "reduce_scatter") {
    check_reducible(in, name);
    check_chunks(in, out, name);
    return do_reduce_scatter(in, out, op, name);
  }
  // out.numel() == size() * in.numel(); chunk r of out is rank r's `in`.
  WorkPtr all_gather(const Tensor& in, Tensor& out, const std::string& name = "all_gather") {
    check_chunks(out, in, name);
    return do_all_gather(in, out, name);
  }
  // t on every rank becomes root's t.
  WorkPtr broadcast(Tensor& t, int root = 0, const std::string& name = "broadcast") {
    TANDEM_CHECK(root >= 0 && root < size(), name, ": root ", root, " is not a rank of a world of size ", size());
    return do_broadcast(t, root, name);
  }
  // Only root's t becomes the reduction over ranks; the other ranks' t are left as they were.
  // The parameter server's push (parameter_server.h): every worker's gradients summed at one server.
  WorkPtr reduce(Tensor& t, int root, ReduceOp op = ReduceOp::Sum, const std::string& name = "reduce") {
    check_reducible(t, name);
    TANDEM_CHECK(root >= 0 && root < size(), name, ": root ", root, " is not a rank of a world of size ", size());
    return do_reduce(t, root, op, name);
  }
  WorkPtr barrier(const std::string& name = "barrier") { return do_barrier(name); }

  // A sub-communicator (MPI_Comm_split): the ranks passing the same `color` form a new one, ranked
  // by `key` (ties: by rank in the parent). Blocking, and a collective of this communicator: every
  // rank calls it in the same place of its sequence of collectives, and every rank gets one (color
  // >= 0; MPI's MPI_UNDEFINED "no group" is not offered). The colours and keys travel first in an
  // all_gather of the parent, so a rank that never calls split is named by the watchdog like any
  // missing rank; the new communicator has a watchdog of its own (transport/watchdog.h names world
  // ranks). The caller owns it and destroys it before dist::finalize(). Tensor parallelism's grid
  // (dist/tp/grid.h) is two splits of the world.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name = "split");

  // "Now" on this communicator's timeline, recorded after the work already issued on this rank's
  // compute stream (GPU) or at this instant (CPU). The reducer uses it for bucket-ready times.
  virtual MarkPtr mark() = 0;

  // Puts the work issued so far on this rank's compute stream under the watchdog as one more
  // collective named `what`: a replayed CUDA graph's (transport/watchdog.h says why). Returns its
  // number; 0 where there is nothing to watch (MPI: no graphs; threads: no GPU).
  virtual long long watch_compute(const std::string& what) {
    (void)what;
    return 0;
  }

 protected:
  // Called with checked arguments only.
  virtual WorkPtr do_all_reduce(Tensor& t, ReduceOp op, const std::string& name) = 0;
  virtual WorkPtr do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op, const std::string& name) = 0;
  virtual WorkPtr do_all_gather(const Tensor& in, Tensor& out, const std::string& name) = 0;
  virtual WorkPtr do_broadcast(Tensor& t, int root, const std::string& name) = 0;
  virtual WorkPtr do_reduce(Tensor& t, int root, ReduceOp op, const std::string& name) = 0;
  virtual WorkPtr do_barrier(const std::string& name) = 0;
  // The backend's half of split(): `plan` is the same on every member of a group. Default: throws.
  virtual std::unique_ptr<Communicator> do_split(const SplitPlan& plan, const std::string& name);

 private:
  static void check_reducible(const Tensor& t, const std::string& name) {
    TANDEM_CHECK(is_floating(t.dtype()), name, ": reductions take f32, f64, f16 or bf16 tensors, got ", t.str());
  }
  long long splits_ = 0;  // split() calls so far: SplitPlan::index
  // `whole` is size() chunks the size of `part`: reduce_scatter's input, all_gather's output.
  void check_chunks(const Tensor& whole, const Tensor& part, const std::string& name) const {
    check_same_dtype(whole, part, name.c_str());
    TANDEM_CHECK(whole.numel() == part.numel() * size(), name, ": ", whole.numel(), " elements where world size x ",
                 part.numel(), " = ", part.numel() * size(), " were expected");
  }
};

}  // namespace tandem::dist
