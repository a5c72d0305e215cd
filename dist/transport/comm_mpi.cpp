// dist/transport/comm_mpi.cpp: the MPI communicator and its communication thread.
//
// Why a thread: MPI's nonblocking collectives (MPI_Iallreduce, ...) only make progress while some
// thread calls into MPI; MPICH has no progress thread of its own by default. If the training thread
// started a bucket's all-reduce and went back to computing backward, the bytes would sit still
// until its next MPI call. So a communication thread takes collectives from a queue, starts each
// one and polls MPI_Test until it is done, while the training thread keeps computing.
//
// Why one collective at a time, in queue order: every rank must issue the same collectives in the
// same order, and the queue order *is* the issue order. Running one at a time keeps the picture
// simple (one all-reduce is already bandwidth-bound on a CPU link).
//
// Host staging: a GPU tensor is copied to host memory on the communication thread, reduced with
// MPI and copied back before the Work counts as finished. Tensor::copy_ orders the copies on the
// device's compute stream and synchronises - acceptable here, because this is the fallback path
// (ranks sharing a GPU, no NCCL), not the fast one.
//
// 16-bit floats: MPI has no f16/bf16 type, so they travel as 16-bit integers with a user-defined
// MPI_Op that widens each pair to f32, adds and rounds back (host_reduce.h: the same per-step
// rounding as NCCL and the thread communicator).
//
// Deadline: a collective that is not done after comm_timeout_s asks the peers (watchdog_overdue,
// watchdog.h), which either ends the job naming the missing rank or, when that rank is busy with
// announced work that advances (busy.h), gives the wait more time. The thread also answers the
// peers' question while idle between collectives (every 20 ms): a rank writing a checkpoint sits
// in no collective, and its answer "busy writing checkpoint, 812 MB so far" is what keeps the
// others waiting instead of ending a healthy job.
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "core/profile.h"
#include "dist/communicator.h"
#include "dist/transport/host_reduce.h"
#include "dist/transport/watchdog.h"

namespace tandem::dist {
namespace {

template <typename H>
void sum16(void* in, void* inout, int* len, MPI_Datatype*) {
  add_into(static_cast<const H*>(in), static_cast<H*>(inout), *len);
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::F16:
    case DType::BF16: return MPI_UINT16_T;  // reduced with the user ops above
  }
  TANDEM_THROW("no MPI type for ", dtype_name(t));
}

class MpiWork final : public Work {
 public:
  long long seq = 0;                                    // issue order on this communicator, from 1
  std::string name;
  std::function<void(MPI_Comm, MPI_Request*)> start;    // comm thread: stage in, start the MPI call
  std::function<void()> finish;                         // comm thread: average, stage out

  void wait() override {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return finished_; });
    if (!error_.empty()) throw Error(error_);
  }
  bool done() override {
    std::lock_guard<std::mutex> lock(m_);
    return finished_;
  }
  MarkPtr started() const override { return std::make_shared<HostMark>(t_start_); }
  MarkPtr finished() const override { return std::make_shared<HostMark>(t_finish_); }

  void set_started() { t_start_ = profile::now_us(); }
  void set_finished(std::string error) {
    std::lock_guard<std::mutex> lock(m_);
    t_finish_ = profile::now_us();
    error_ = std::move(error);
    finished_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool finished_ = false;
  std::string error_;
  double t_start_ = 0, t_finish_ = 0;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm world, bool staging, Device gpu, double timeout_s)
      : staging_(staging), gpu_(gpu), timeout_s_(timeout_s) {
    // Private duplicates: tandem's collectives can never match a user's MPI calls, and the watchdog's
    // messages never match a collective.
    MPI_CHECK(MPI_Comm_dup(world, &comm_));
    MPI_CHECK(MPI_Comm_dup(world, &watch_));
    MPI_CHECK(MPI_Comm_dup(world, &parent_));
    MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    MPI_CHECK(MPI_Op_create(&sum16<Half>, 1, &sum_f16_));
    MPI_CHECK(MPI_Op_create(&sum16<BFloat16>, 1, &sum_bf16_));
    thread_ = std::thread([this] { loop(); });
  }
  ~MpiCommunicator() override {
    { std::lock_guard<std::mutex> lock(m_); stop_ = true; }
    cv_.notify_all();
    thread_.join();
    MPI_Op_free(&sum_f16_);
    MPI_Op_free(&sum_bf16_);
    MPI_Comm_free(&parent_);
    MPI_Comm_free(&watch_);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return staging_ ? "mpi+host-staging" : "mpi"; }
  MarkPtr mark() override { return std::make_shared<HostMark>(profile::now_us()); }

 private:  // the collectives, after Communicator checked their arguments
  WorkPtr do_all_reduce(Tensor& t, ReduceOp op, const std::string& name) override {
    return collective(name, t, t, op == ReduceOp::Avg, [this](Tensor& h, Tensor&, MPI_Comm c, MPI_Request* r) {
      MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, h.data_ptr(), count(h), mpi_type(h.dtype()), reduce_op(h.dtype()), c, r));
    });
  }
  WorkPtr do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op, const std::string& name) override {
    return collective(name, in, out, op == ReduceOp::Avg, [this](Tensor& hi, Tensor& ho, MPI_Comm c, MPI_Request* r) {
      MPI_CHECK(MPI_Ireduce_scatter_block(hi.data_ptr(), ho.data_ptr(), count(ho), mpi_type(ho.dtype()),
                                          reduce_op(hi.dtype()), c, r));
    });
  }
  WorkPtr do_all_gather(const Tensor& in, Tensor& out, const std::string& name) override {
    return collective(name, in, out, false, [](Tensor& hi, Tensor& ho, MPI_Comm c, MPI_Request* r) {
      MPI_Datatype ty = mpi_type(hi.dtype());
      MPI_CHECK(MPI_Iallgather(hi.data_ptr(), count(hi), ty, ho.data_ptr(), count(hi), ty, c, r));
    });
  }
  WorkPtr do_broadcast(Tensor& t, int root, const std::string& name) override {
    return collective(name, t, t, false, [root](Tensor& h, Tensor&, MPI_Comm c, MPI_Request* r) {
      MPI_CHECK(MPI_Ibcast(h.data_ptr(), count(h), mpi_type(h.dtype()), root, c, r));
    });
  }
  WorkPtr do_reduce(Tensor& t, int root, ReduceOp op, const std::string& name) override {
    const bool is_root = rank_ == root;  // only the root's t changes: the others skip average and stage-out
    return collective(name, t, t, op == ReduceOp::Avg, [=, this](Tensor& h, Tensor&, MPI_Comm c, MPI_Request* r) {
      // MPI_IN_PLACE is legal only at the root; the others send their buffer and keep it.
      MPI_CHECK(MPI_Ireduce(is_root ? MPI_IN_PLACE : h.data_ptr(), is_root ? h.data_ptr() : nullptr, count(h),
                            mpi_type(h.dtype()), reduce_op(h.dtype()), root, c, r));
    }, is_root);
  }
  WorkPtr do_barrier(const std::string& name) override {
    return submit(name, [](MPI_Comm c, MPI_Request* r) { MPI_CHECK(MPI_Ibarrier(c, r)); }, [] {});
  }
  // MPI_Comm_split blocks and has no deadline, so it runs only after the watched all_gather of
  // Communicator::split proved that every rank got this far; it runs on parent_, from the caller's
  // thread, never on comm_, which the communication thread may be using (MPI forbids two threads in
  // collectives on one communicator at once). Its order (key, then rank) is the plan's.
  std::unique_ptr<Communicator> do_split(const SplitPlan& plan, const std::string& name) override {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split(parent_, plan.color, plan.new_rank, &sub), name, ": MPI_Comm_split failed");
    auto c = std::make_unique<MpiCommunicator>(sub, staging_, gpu_, timeout_s_);
    MPI_Comm_free(&sub);  // the new communicator keeps its own duplicates
    return c;
  }

  // One collective from `in` to `out` (in-place ones pass the same tensor twice) on the buffers MPI works on:
  // `call` starts it once `in` is staged in; when it is done, `out`'s buffer is divided by the world size if
  // `average` and staged out - unless `out_changes` is false (a reduce's non-root ranks).
  template <typename F>
  WorkPtr collective(const std::string& name, const Tensor& in, Tensor& out, bool average, F call,
                     bool out_changes = true) {
    Tensor hi = host_of(in, name), ho = &in == &out ? hi : host_of(out, name);
    return submit(name, [=](MPI_Comm c, MPI_Request* r) mutable {
      stage(hi, in);
      call(hi, ho, c, r);
    }, [=, this]() mutable {
      if (!out_changes) return;
      if (average) divide(ho, size_);
      stage(out, ho);
    });
  }

  static int count(const Tensor& t) {
    TANDEM_CHECK(t.numel() <= INT32_MAX, "MPI counts are 32-bit: split tensors above 2^31 elements");
    return static_cast<int>(t.numel());
  }
  MPI_Op reduce_op(DType t) const { return t == DType::F16 ? sum_f16_ : t == DType::BF16 ? sum_bf16_ : MPI_SUM; }
  // The buffer MPI works on: the tensor itself on the CPU, a host copy of a GPU tensor when staging.
  Tensor host_of(const Tensor& t, const std::string& name) const {
    if (!t.is_cuda()) return t;
    TANDEM_CHECK(staging_, name, ": ", t.str(), " is on a GPU but this is the MPI communicator without host "
                 "staging; use comm_for(tensor.device()), or init with host_staging = true");
    return Tensor::empty(t.shape(), t.dtype(), Device::cpu());
  }
  // Host staging copies (no-ops when MPI works on the tensor itself).
  static void stage(Tensor& dst, const Tensor& src) { if (!dst.shares_storage(src)) dst.copy_(src); }

  WorkPtr submit(const std::string& name, std::function<void(MPI_Comm, MPI_Request*)> start,
                 std::function<void()> finish) {
    auto w = std::make_shared<MpiWork>();
    w->name = name;
    w->start = std::move(start);
    w->finish = std::move(finish);
    {
      std::lock_guard<std::mutex> lock(m_);
      w->seq = ++issued_;
      queue_.push_back(w);
    }
    cv_.notify_one();
    return w;
  }

  void loop() {
    if (staging_ && gpu_.is_cuda()) set_device(gpu_);  // host-staging copies run from this thread
    for (;;) {
      std::shared_ptr<MpiWork> w;
      {
        std::unique_lock<std::mutex> lock(m_);
        // 20 ms: a peer's question waits at most that long for an idle rank's answer (the asker
        // allows 3 s), and an idle thread's MPI_Iprobe 50 times a second costs nothing measurable.
        cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) {
          if (stop_) return;  // nothing left to do
          lock.unlock();
          watchdog_answer(watch_, finished_);  // idle: "the last collective I finished", and my Busy scope
          continue;
        }
        w = queue_.front();
        queue_.pop_front();
      }
      run(*w);
      finished_ = w->seq;
    }
  }

  void run(MpiWork& w) {
    using clock = std::chrono::steady_clock;
    std::string error;
    try {
      w.set_started();
      MPI_Request req = MPI_REQUEST_NULL;
      w.start(comm_, &req);
      auto deadline = clock::now() + std::chrono::duration<double>(timeout_s_);
      OverdueMemory memory;
      int flag = 0;
      for (long polls = 0;; ++polls) {
        MPI_CHECK(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "collective '", w.name, "' failed");
        if (flag) break;
        // Spin briefly for small messages, then back off: ranks may share cores with compute.
        if (polls > 200) std::this_thread::sleep_for(std::chrono::microseconds(50));
        watchdog_answer(watch_, w.seq);  // tell a timed-out peer that we reached this collective
        // Returns only when the missing peers are busy and advancing: ask again after that long.
        if (clock::now() > deadline)
          deadline = clock::now() + std::chrono::duration<double>(watchdog_overdue(watch_, w.seq, w.name, timeout_s_, memory));
      }
      w.finish();
    } catch (const std::exception& e) {
      error = e.what();
    }
    // A finished collective lets go of its tensors, so a caller that drops its own handle frees the
    // memory at once (ZeRO-2 releases a bucket's buffer when its reduce-scatter is done).
    w.start = nullptr, w.finish = nullptr;
    w.set_finished(std::move(error));
  }

  bool staging_;
  Device gpu_;
  double timeout_s_;
  MPI_Comm comm_ = MPI_COMM_NULL, watch_ = MPI_COMM_NULL;
  MPI_Comm parent_ = MPI_COMM_NULL;  // split's: the caller's thread runs MPI_Comm_split here
  MPI_Op sum_f16_ = MPI_OP_NULL, sum_bf16_ = MPI_OP_NULL;
  int rank_ = 0, size_ = 1;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<MpiWork>> queue_;
  long long issued_ = 0;
  long long finished_ = 0;  // the communication thread's own: the last collective it completed
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm world, bool staging, Device gpu, double timeout_s) {
  return std::make_unique<MpiCommunicator>(world, staging, gpu, timeout_s);
}

}  // namespace tandem::dist
