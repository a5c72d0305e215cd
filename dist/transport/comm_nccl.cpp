// dist/transport/comm_nccl.cpp: the NCCL communicator (CUDA builds only; not run on the CPU-only CI).
//
// Streams and events - the whole trick of overlapping communication with backward:
//   compute stream:  ... grad kernels of bucket k | record E_k | more backward kernels ...
//   comm stream:                                wait E_k | ncclAllReduce(bucket k) | record D_k
//   compute stream (end of backward):                                    wait D_k | scale by 1/N
// The comm stream waits for E_k, so the all-reduce reads finished gradients; the compute stream
// waits for D_k before using the averaged gradients. Neither wait blocks the host: the CPU keeps
// enqueueing backward kernels while NCCL runs. A host sync here would serialise the two streams.
//
// Timing uses CUDA events recorded on the streams (Mark = event), so the timeline shows when the
// GPU actually started and finished each all-reduce, not when the host enqueued it.
// NVTX ranges named like the trace events ("allreduce bucket 3") mark the enqueue on the host.
//
// Deadline: NCCL kernels wait forever for a peer that died. A watchdog thread polls the oldest
// outstanding collective's end event and calls watchdog_overdue (watchdog.h) past comm_timeout_s,
// counted from its issue or from the end of the collective before it, whichever is later: that ends
// the job naming the missing rank, or - when the missing rank is busy with announced host work that
// advances (busy.h: rank 0 writing a checkpoint) - gives the wait more time. The thread also answers
// the peers' question while nothing is outstanding, so this rank's own announced work keeps them
// waiting. It also
// polls ncclCommGetAsyncError, where NCCL reports network and peer failures (the end event then never
// fires); its documented remedy is ncclCommAbort, so the job aborts at once with NCCL's reason instead
// of sitting out the whole timeout.
// A replayed CUDA graph (core/cuda/graph.h) runs collectives that were captured, not issued here:
// watch_compute puts each replay under the same watchdog as one collective ("replayed step 57"),
// through an event recorded on the compute stream after the replay, which the graph's collectives
// were joined back into.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include "core/cuda/context.h"
#include "core/graph_capture.h"
#include "dist/communicator.h"
#include "dist/transport/watchdog.h"

namespace tandem::dist {
namespace {

struct EventMark final : Mark {
  cudaEvent_t ev = nullptr;
  // timing = false: only ever queried (the watchdog's replay marks), which CUDA makes cheaper.
  explicit EventMark(cudaStream_t s, bool timing = true) {
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, timing ? cudaEventDefault : cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ev, s));
  }
  ~EventMark() override { cudaEventDestroy(ev); }
  // cudaEventQuery never blocks: cudaSuccess once the stream ran past the record. An error (a
  // kernel fault) also counts as "will not wait", so that us_since reports it through CUDA_CHECK.
  bool complete() const override { return cudaEventQuery(ev) != cudaErrorNotReady; }
  double us_since(const Mark& origin) const override {
    const auto& o = static_cast<const EventMark&>(origin);
    CUDA_CHECK(cudaEventSynchronize(o.ev));
    CUDA_CHECK(cudaEventSynchronize(ev));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, o.ev, ev));
    return 1000.0 * ms;
  }
};

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
  }
  TANDEM_THROW("no NCCL type for ", dtype_name(t));
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Avg ? ncclAvg : ncclSum; }

class NcclWork final : public Work {
 public:
  NcclWork(int device, std::shared_ptr<EventMark> start, std::shared_ptr<EventMark> end, std::vector<Tensor> keep)
      : device_(device), start_(std::move(start)), end_(std::move(end)), keep_(std::move(keep)) {}
  void wait() override {
    // The compute stream waits for the comm stream; the host returns at once.
    CUDA_CHECK(cudaStreamWaitEvent(cuda::compute_stream(device_), end_->ev, 0));
  }
  // Not inside a capture: its event was recorded in the capturing stream, and asking for it returns
  // cudaErrorCapturedEvent (driver_types.h), which would also stay behind as this thread's last
  // error for the next launch check to report as its own. A captured collective is never done.
  bool done() override { return !graph_capture::active(device_) && cudaEventQuery(end_->ev) == cudaSuccess; }
  MarkPtr started() const override { return start_; }
  MarkPtr finished() const override { return end_; }

 private:
  int device_;
  std::shared_ptr<EventMark> start_, end_;
  std::vector<Tensor> keep_;  // the buffers stay alive while NCCL may still use them
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm world, Device gpu, double timeout_s) : device_(gpu.index), timeout_s_(timeout_s) {
    MPI_CHECK(MPI_Comm_rank(world, &rank_));
    MPI_CHECK(MPI_Comm_size(world, &size_));
    MPI_CHECK(MPI_Comm_dup(world, &watch_));
    MPI_CHECK(MPI_Comm_dup(world, &parent_));
    // NCCL's rendezvous: rank 0 makes a unique id, MPI carries it to everyone.
    ncclUniqueId id;
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, world));
    CUDA_CHECK(cudaSetDevice(device_));
    NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_), "check that every rank sees its own GPU");
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    scratch_ = Tensor::zeros({1}, DType::F32, gpu);
    watchdog_ = std::thread([this] { watch(); });
  }
  ~NcclCommunicator() override {
    stop_ = true;
    watchdog_.join();
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
    MPI_Comm_free(&parent_);
    MPI_Comm_free(&watch_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  Device device() const override { return Device::cuda(device_); }
  MarkPtr mark() override { return std::make_shared<EventMark>(cuda::compute_stream(device_)); }
  long long watch_compute(const std::string& what) override {
    TANDEM_CHECK(!graph_capture::active(device_), "watch_compute(\"", what, "\") inside a CUDA graph capture: its "
                 "event would belong to the graph and never fire for the watchdog. Call it after replay()");
    auto end = std::make_shared<EventMark>(cuda::compute_stream(device_), /*timing=*/false);
    std::lock_guard<std::mutex> lock(m_);
    outstanding_.push_back({++issued_, what, end, deadline_from_now()});
    return issued_;
  }

 private:  // the collectives, after Communicator checked their arguments
  WorkPtr do_all_reduce(Tensor& t, ReduceOp op, const std::string& name) override {
    return enqueue(name, {t}, [&] {
      NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.dtype()), nccl_op(op), comm_, stream_));
    });
  }
  WorkPtr do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op, const std::string& name) override {
    return enqueue(name, {in, out}, [&] {
      NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(in.dtype()), nccl_op(op),
                                   comm_, stream_));
    });
  }
  WorkPtr do_all_gather(const Tensor& in, Tensor& out, const std::string& name) override {
    return enqueue(name, {in, out}, [&] {
      NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in.dtype()), comm_, stream_));
    });
  }
  WorkPtr do_broadcast(Tensor& t, int root, const std::string& name) override {
    return enqueue(name, {t}, [&] {
      NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.dtype()), root, comm_, stream_));
    });
  }
  WorkPtr do_reduce(Tensor& t, int root, ReduceOp op, const std::string& name) override {
    return enqueue(name, {t}, [&] {
      NCCL_CHECK(ncclReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.dtype()), nccl_op(op), root, comm_,
                            stream_));
    });
  }
  WorkPtr do_barrier(const std::string& name) override {
    Tensor s = scratch_;  // NCCL has no barrier: a one-element all-reduce is one
    return all_reduce(s, ReduceOp::Sum, name);
  }
  // A new NCCL communicator per group, made the way the world's is: the group's MPI communicator
  // (split from parent_, an MPI duplicate of this one's ranks) carries the group's unique id, and it
  // becomes the new communicator's watchdog channel. ncclCommSplit would share this communicator's
  // resources, but the watchdog needs the MPI side anyway, and this path is the constructor every
  // run already exercises. MPI_Comm_split has no deadline: Communicator::split's watched all_gather
  // ran first, so every rank is known to be here.
  std::unique_ptr<Communicator> do_split(const SplitPlan& plan, const std::string& name) override {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split(parent_, plan.color, plan.new_rank, &sub), name, ": MPI_Comm_split failed");
    auto c = std::make_unique<NcclCommunicator>(sub, Device::cuda(device_), timeout_s_);
    MPI_Comm_free(&sub);  // the new communicator keeps its own duplicates
    return c;
  }

  // Checks that the tensors are on this communicator's GPU, then enqueues `call` on the comm stream
  // after everything already on the compute stream; `keep` stays alive until the collective is done.
  template <typename F>
  WorkPtr enqueue(const std::string& name, std::vector<Tensor> keep, F&& call) {
    for (const Tensor& t : keep)
      TANDEM_CHECK(t.is_cuda() && t.device().index == device_, name, ": NCCL works on tensors on cuda:", device_,
                   ", got ", t.str(), "; use comm_for(tensor.device())");
    nvtxRangePushA(name.c_str());
    // Hand-off from the compute stream: everything enqueued so far (the gradients) before NCCL.
    cudaEvent_t ready;
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ready, cuda::compute_stream(device_)));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    CUDA_CHECK(cudaEventDestroy(ready));  // released by the driver once the wait has consumed it
    auto start = std::make_shared<EventMark>(stream_);
    call();
    auto end = std::make_shared<EventMark>(stream_);
    nvtxRangePop();
    // A collective captured into a CUDA graph (core/graph_capture.h) is not watched: its events
    // belong to the graph, and querying them (or the capturing stream) from the watchdog thread
    // would fail or invalidate the capture. Each replay is watched as a whole (watch_compute).
    if (!graph_capture::active(device_)) {
      std::lock_guard<std::mutex> lock(m_);
      outstanding_.push_back({++issued_, name, end, deadline_from_now()});
    }
    return std::make_shared<NcclWork>(device_, start, end, std::move(keep));
  }

  // Watchdog thread: retires finished collectives, aborts the job when the oldest one is overdue.
  void watch() {
    CUDA_CHECK(cudaSetDevice(device_));
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::lock_guard<std::mutex> lock(m_);
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
        std::fprintf(stderr, "[rank %d] tandem watchdog: NCCL reported an asynchronous error (%s) on cuda:%d; "
                     "aborting the job. Rerun with NCCL_DEBUG=WARN to see which link or peer failed.\n",
                     rank_, ncclGetErrorString(async), device_);
        ncclCommAbort(comm_);  // frees NCCL's kernels and proxy threads so MPI_Abort is not stuck behind them
        abort_job();
      }
      while (!outstanding_.empty() && cudaEventQuery(outstanding_.front().end->ev) == cudaSuccess) {
        outstanding_.pop_front();
        // They normally finish in issue order (one comm stream; a replay waits for the work before
        // it), so the next one's deadline counts from now, however far ahead the host queued it:
        // a replay costs the host microseconds, and with a device-resident batch nothing else holds
        // the host back, so a replay may sit in the queue for longer than the timeout.
        if (!outstanding_.empty())
          outstanding_.front().deadline = std::max(outstanding_.front().deadline, deadline_from_now());
      }
      if (outstanding_.empty()) {
        watchdog_answer(watch_, issued_);  // idle: everything issued has finished; and my Busy scope
        continue;
      }
      Pending& p = outstanding_.front();
      // A kernel fault on this GPU means p can never finish: say so now rather than after the
      // timeout, and before a peer blames this rank for not reaching p.
      if (!watchdog_local_fault().empty()) watchdog_abort(watch_, p.seq, p.name, timeout_s_);
      watchdog_answer(watch_, p.seq);
      // Returns only when the missing peers are busy and advancing: ask again after that long.
      if (std::chrono::steady_clock::now() > p.deadline)
        p.deadline = deadline_from_now(watchdog_overdue(watch_, p.seq, p.name, timeout_s_, p.memory));
    }
  }

  // Now + `seconds` (default: the timeout), on the steady clock.
  std::chrono::steady_clock::time_point deadline_from_now(double seconds = -1) const {
    const double s = seconds < 0 ? timeout_s_ : seconds;
    return std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
  }

  struct Pending {
    long long seq;
    std::string name;
    std::shared_ptr<EventMark> end;
    std::chrono::steady_clock::time_point deadline;  // past it, the watchdog asks the peers
    OverdueMemory memory = {};                        // what the last question found
  };
  int device_;
  double timeout_s_;
  int rank_ = 0, size_ = 1;
  MPI_Comm watch_ = MPI_COMM_NULL;
  MPI_Comm parent_ = MPI_COMM_NULL;  // split's: MPI_Comm_split runs here, from the caller's thread
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  Tensor scratch_;
  std::mutex m_;
  std::deque<Pending> outstanding_;
  long long issued_ = 0;
  std::atomic<bool> stop_{false};
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm world, Device gpu, double timeout_s) {
  return std::make_unique<NcclCommunicator>(world, gpu, timeout_s);
}

}  // namespace tandem::dist
