// dist/transport/comm_thread.cpp: the thread communicator's rendezvous and arithmetic (see comm_thread.h).
//
// One mutex and one condition variable per group. A collective is an Op, found by its issue number
// (the k-th call of every rank is Op k): each rank files its tensors in it; the rank that files
// last takes it out of the open set and runs it outside the lock, then marks it done and wakes the
// waiters. Ranks write nothing of each other's until then, and a waiter reads its results only
// after it saw `done` under the mutex, which orders the writes before its reads.
#include "dist/transport/comm_thread.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>

#include "dist/transport/busy.h"
#include "dist/transport/host_reduce.h"
#include "dist/transport/watchdog.h"

namespace tandem::dist {
namespace {

enum class Kind { AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, Barrier };
const char* kind_name(Kind k) {
  const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "barrier"};
  return names[static_cast<int>(k)];
}

struct Op {
  long long seq = 0;
  Kind kind = Kind::Barrier;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  std::vector<Tensor> in, out;        // per rank
  std::vector<std::string> key, what;  // per rank: what must agree, and how to name it in errors
  std::vector<char> arrived;          // per rank
  int count = 0;                      // ranks that issued it
  bool done = false;
  std::string error;                  // set with done when the ranks disagreed
  double t_start = 0, t_finish = 0;
};

struct Group {
  Group(int n, ThreadOptions o, std::vector<int> w) : ranks(n), options(o), world(std::move(w)) {}
  const int ranks;
  const ThreadOptions options;
  const std::vector<int> world;  // world[r]: the rank of run_ranks' group that is rank r here
  // threads[r]: the thread that runs rank r (run_ranks sets it; else its last caller), whose Busy
  // scope (busy.h) stands for the rank's announced work when the others wait for it. Under m.
  std::vector<std::thread::id> threads = std::vector<std::thread::id>(ranks);
  std::mutex m;
  std::condition_variable cv;
  std::map<long long, std::shared_ptr<Op>> open;  // issued by some ranks, not yet by all
  std::string failure;                            // non-empty: every wait and every new call fails
  // Sub-groups made by split, keyed by (split number, colour): the first member to arrive makes
  // the group, the others find it here. Weak: the members' communicators own it.
  std::map<std::pair<long long, int>, std::weak_ptr<Group>> children;
  // Under m. The first failure stays: later ones are its echoes. A failure reaches every sub-group
  // too (locked parent first, then child: never the other way), so ranks waiting inside a split
  // communicator stop as well.
  void fail(const std::string& why) {
    if (failure.empty()) failure = why;
    cv.notify_all();
    for (auto& [k, weak] : children)
      if (std::shared_ptr<Group> c = weak.lock()) {
        std::lock_guard<std::mutex> lock(c->m);
        c->fail(why);
      }
  }
  bool root = false;  // made by make_thread_group, not by split
  // How errors name rank r: "2" in the group run_ranks made; "1 (world rank 3)" in a sub-group.
  std::string number_of(int r) const {
    return std::to_string(r) + (root ? "" : " (world rank " + std::to_string(world[r]) + ")");
  }
};

// The sum over ranks of in[r][offset, offset + count), into a fresh tensor, as a binary tree over
// the ranks in order: ((r0 + r1) + (r2 + r3)) + ... - the order of MPICH's recursive doubling, so
// results match an MPI run's bits where MPICH takes that path, and rounding grows with log N, not N.
Tensor sum_ranks(const std::vector<Tensor>& in, int64_t offset, int64_t count) {
  const DType dt = in[0].dtype();
  const size_t es = dtype_size(dt);
  const size_t n = in.size();
  auto slice = [&](size_t r) { return static_cast<const char*>(in[r].data_ptr()) + offset * es; };
  std::vector<Tensor> acc(n);  // the even ranks' partial sums: the tree's left operands
  for (size_t r = 0; r < n; r += 2) {
    acc[r] = Tensor::empty({count}, dt);
    if (count > 0) std::memcpy(acc[r].data_ptr(), slice(r), count * es);  // empty: maybe no storage
  }
  for (size_t step = 1; step < n; step *= 2)
    for (size_t i = 0; i + step < n; i += 2 * step) {
      const void* right = step == 1 ? slice(i + 1) : acc[i + step].data_ptr();
      auto add = [&](auto* left) {
        using T = std::remove_pointer_t<decltype(left)>;
        add_into(static_cast<const T*>(right), left, count);
      };
      switch (dt) {
        case DType::F32: add(acc[i].data<float>()); break;
        case DType::F64: add(acc[i].data<double>()); break;
        case DType::F16: add(acc[i].data<Half>()); break;
        case DType::BF16: add(acc[i].data<BFloat16>()); break;
        default: TANDEM_THROW("the thread communicator cannot reduce ", dtype_name(dt));
      }
    }
  return acc[0];
}

void copy_bytes(const Tensor& dst, size_t dst_offset, const Tensor& src) {
  // An empty tensor may have no storage (a null pointer), which memmove must not get even for 0 bytes.
  if (src.nbytes() == 0) return;
  std::memmove(static_cast<char*>(dst.data_ptr()) + dst_offset, src.data_ptr(), src.nbytes());
}

// Moves the data of a complete Op (every rank's tensors filed and checked).
void execute(Op& o, int n) {
  auto reduced = [&](int64_t offset, int64_t count) {
    Tensor s = sum_ranks(o.in, offset, count);
    if (o.op == ReduceOp::Avg) divide(s, n);
    return s;
  };
  switch (o.kind) {
    case Kind::Barrier: return;
    case Kind::Broadcast:
      for (int r = 0; r < n; ++r)
        if (r != o.root) copy_bytes(o.out[r], 0, o.in[o.root]);
      return;
    case Kind::AllGather:
      for (int r = 0; r < n; ++r)
        for (int q = 0; q < n; ++q) copy_bytes(o.out[r], q * o.in[q].nbytes(), o.in[q]);
      return;
    case Kind::AllReduce: {
      const Tensor s = reduced(0, o.in[0].numel());
      for (int r = 0; r < n; ++r) copy_bytes(o.out[r], 0, s);
      return;
    }
    case Kind::Reduce: copy_bytes(o.out[o.root], 0, reduced(0, o.in[0].numel())); return;
    case Kind::ReduceScatter: {
      const int64_t chunk = o.out[0].numel();
      for (int r = 0; r < n; ++r) copy_bytes(o.out[r], 0, reduced(r * chunk, chunk));
      return;
    }
  }
}

class ThreadWork final : public Work {
 public:
  ThreadWork(std::shared_ptr<Group> g, std::shared_ptr<Op> op) : g_(std::move(g)), op_(std::move(op)) {}

  void wait() override {
    std::unique_lock<std::mutex> lock(g_->m);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(g_->options.timeout_s);
    while (!op_->done && g_->failure.empty())
      if (g_->cv.wait_until(lock, deadline) == std::cv_status::timeout && !op_->done) {
        // The watchdog's verdict (watchdog.h), with each missing rank's thread's Busy scope as its
        // answer: busy and advancing ranks get more time, anything else fails the group.
        // Every rank there: the last one is running the collective on its thread, which ends it.
        const OverdueVerdict v = verdict();
        if (v.kind == OverdueVerdict::Kind::Wait || v.kind == OverdueVerdict::Kind::AllReached)
          deadline = std::chrono::steady_clock::now() +
                     std::chrono::duration<double>(v.kind == OverdueVerdict::Kind::Wait ? v.wait_s : g_->options.timeout_s);
        else g_->fail(v.kind == OverdueVerdict::Kind::Stalled ? stalled(v) : missing());
      }
    if (!op_->done) TANDEM_THROW(g_->failure);
    if (!op_->error.empty()) TANDEM_THROW(op_->error);
  }
  bool done() override {
    std::lock_guard<std::mutex> lock(g_->m);
    return op_->done;
  }
  MarkPtr started() const override { return std::make_shared<HostMark>(op_->t_start); }
  MarkPtr finished() const override { return std::make_shared<HostMark>(op_->t_finish); }

 private:
  OverdueVerdict verdict() const {  // under g_->m
    std::vector<PeerAnswer> answers(g_->ranks);
    for (int r = 0; r < g_->ranks; ++r) {
      PeerAnswer& a = answers[r];
      a.answered = true;  // a thread cannot die alone: it either issued the collective or is elsewhere
      a.reached = op_->arrived[r] ? op_->seq : op_->seq - 1;
      if (!op_->arrived[r] && g_->threads[r] != std::thread::id()) a.busy = busy_report(g_->threads[r]);
    }
    return judge_overdue(op_->seq, g_->options.timeout_s, /*me=*/-1, answers);
  }
  std::string stalled(const OverdueVerdict& v) const {  // under g_->m
    std::string ranks, why;
    for (int r : v.stalled) {
      ranks += (ranks.empty() ? "" : ", ") + g_->number_of(r);
      why += (why.empty() ? "" : "; ") + ("rank " + g_->number_of(r) + " was " + describe(busy_report(g_->threads[r])));
    }
    int first = 0;
    while (!op_->arrived[first]) ++first;
    return "thread communicator: rank(s) " + ranks + " did not reach collective #" + std::to_string(op_->seq) +
           " (" + op_->what[first] + "): " + why + ". Its progress stood still for the whole " +
           std::to_string(g_->options.timeout_s) + " s timeout, so it is hung inside that work";
  }
  std::string missing() const {  // under g_->m
    std::string ranks;
    for (int r = 0; r < g_->ranks; ++r)
      if (!op_->arrived[r]) ranks += (ranks.empty() ? "" : ", ") + g_->number_of(r);
    int first = 0;
    while (!op_->arrived[first]) ++first;
    return "thread communicator: rank(s) " + ranks + " did not reach collective #" + std::to_string(op_->seq) +
           " (" + op_->what[first] + ") within " + std::to_string(g_->options.timeout_s) + " s. Every rank must "
           "issue the same collectives in the same order; a rank that threw or returned early never will";
  }

  std::shared_ptr<Group> g_;
  std::shared_ptr<Op> op_;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Group> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->ranks; }
  const char* backend() const override { return "threads"; }
  MarkPtr mark() override { return std::make_shared<HostMark>(); }
  Group& group() const { return *g_; }

 private:
  WorkPtr do_all_reduce(Tensor& t, ReduceOp op, const std::string& name) override {
    return submit(Kind::AllReduce, name, t, t, op, 0);
  }
  WorkPtr do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op, const std::string& name) override {
    return submit(Kind::ReduceScatter, name, in, out, op, 0);
  }
  WorkPtr do_all_gather(const Tensor& in, Tensor& out, const std::string& name) override {
    return submit(Kind::AllGather, name, in, out, ReduceOp::Sum, 0);
  }
  WorkPtr do_broadcast(Tensor& t, int root, const std::string& name) override {
    return submit(Kind::Broadcast, name, t, t, ReduceOp::Sum, root);
  }
  WorkPtr do_reduce(Tensor& t, int root, ReduceOp op, const std::string& name) override {
    return submit(Kind::Reduce, name, t, t, op, root);
  }
  WorkPtr do_barrier(const std::string& name) override {
    return submit(Kind::Barrier, name, Tensor(), Tensor(), ReduceOp::Sum, 0);
  }
  // The plan is the same on every member (Communicator::split gathered it), so the first member to
  // get here makes the sub-group and the others find it by (split number, colour).
  std::unique_ptr<Communicator> do_split(const SplitPlan& plan, const std::string& name) override {
    std::lock_guard<std::mutex> lock(g_->m);
    TANDEM_CHECK(g_->failure.empty(), name, ": the thread communicator's group has failed: ", g_->failure);
    std::weak_ptr<Group>& slot = g_->children[{plan.index, plan.color}];
    std::shared_ptr<Group> sub = slot.lock();
    if (!sub) {
      std::vector<int> world;
      for (int r : plan.members) world.push_back(g_->world[r]);
      sub = std::make_shared<Group>(static_cast<int>(plan.members.size()), g_->options, std::move(world));
      slot = sub;
    }
    return std::make_unique<ThreadCommunicator>(sub, plan.new_rank);
  }

  WorkPtr submit(Kind kind, const std::string& name, const Tensor& in, const Tensor& out, ReduceOp op, int root) {
    for (const Tensor* t : {&in, &out})
      TANDEM_CHECK(!t->defined() || t->device().is_cpu(), name, ": the thread communicator takes CPU tensors "
                   "only, got ", t->str(), "; GPU paths are tested with the NCCL or MPI communicator under mpiexec");
    // What every rank must agree on, and how this rank's call reads in an error message.
    std::string key = kind_name(kind);
    if (in.defined()) key += std::string(" ") + dtype_name(in.dtype()) + " " + std::to_string(in.numel()) + " -> " +
                             std::to_string(out.numel());
    if (kind == Kind::Broadcast || kind == Kind::Reduce) key += " root " + std::to_string(root);
    if (kind == Kind::AllReduce || kind == Kind::ReduceScatter || kind == Kind::Reduce)
      key += op == ReduceOp::Avg ? " avg" : " sum";
    std::shared_ptr<Op> o;
    {
      std::lock_guard<std::mutex> lock(g_->m);
      TANDEM_CHECK(g_->failure.empty(), name, ": the thread communicator's group has failed: ", g_->failure);
      const long long seq = ++issued_;
      std::shared_ptr<Op>& slot = g_->open[seq];
      if (!slot) {
        slot = std::make_shared<Op>();
        slot->seq = seq, slot->kind = kind, slot->op = op, slot->root = root;
        slot->in.resize(g_->ranks), slot->out.resize(g_->ranks), slot->key.resize(g_->ranks);
        slot->what.resize(g_->ranks), slot->arrived.assign(g_->ranks, 0);
      }
      o = slot;
      o->in[rank_] = in, o->out[rank_] = out, o->key[rank_] = key, o->what[rank_] = key + " '" + name + "'";
      o->arrived[rank_] = 1;
      g_->threads[rank_] = std::this_thread::get_id();
      if (++o->count < g_->ranks) return std::make_shared<ThreadWork>(g_, o);
      g_->open.erase(seq);  // complete: this rank runs it
    }
    run(*o);
    return std::make_shared<ThreadWork>(g_, o);
  }

  void run(Op& o) {
    const double start = profile::now_us();
    std::string error;
    for (int r = 1; r < g_->ranks && error.empty(); ++r)
      if (o.key[r] != o.key[0])
        error = "collective #" + std::to_string(o.seq) + ": rank " + g_->number_of(0) + " issued " + o.what[0] + " but rank " +
                g_->number_of(r) + " issued " + o.what[r] + ". Every rank must issue the same collectives in "
                "the same order, with the same sizes and dtypes (communicator.h)";
    if (error.empty()) {
      try {
        execute(o, g_->ranks);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    std::lock_guard<std::mutex> lock(g_->m);
    o.t_start = start, o.t_finish = profile::now_us();
    o.error = std::move(error);
    o.done = true;
    o.in.clear(), o.out.clear();  // a finished collective lets go of the tensors, as MPI's does
    g_->cv.notify_all();
  }

  std::shared_ptr<Group> g_;
  int rank_;
  long long issued_ = 0;  // this rank's collectives so far: the next one is #issued_ + 1
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_group(int ranks, ThreadOptions options) {
  TANDEM_CHECK(ranks >= 1, "a thread group needs at least one rank, got ", ranks);
  TANDEM_CHECK(options.timeout_s > 0, "ThreadOptions::timeout_s must be positive, got ", options.timeout_s);
  std::vector<int> world(ranks);
  for (int r = 0; r < ranks; ++r) world[r] = r;
  auto g = std::make_shared<Group>(ranks, options, std::move(world));
  g->root = true;
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < ranks; ++r) out.push_back(std::make_unique<ThreadCommunicator>(g, r));
  return out;
}

void run_ranks(int ranks, const std::function<void(Communicator&)>& body, ThreadOptions options) {
  std::vector<std::unique_ptr<Communicator>> comms = make_thread_group(ranks, options);
  Group& g = static_cast<ThreadCommunicator&>(*comms[0]).group();
  std::vector<std::exception_ptr> errors(ranks);
  std::atomic<int> first{-1};  // the rank whose error failed the group; the others' are its echoes
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      {
        std::lock_guard<std::mutex> lock(g.m);
        g.threads[r] = std::this_thread::get_id();  // before its first collective: a Busy scope may come first
      }
      try {
        body(*comms[r]);
      } catch (...) {
        errors[r] = std::current_exception();
        int none = -1;
        first.compare_exchange_strong(none, r);
        std::string what = "an exception that is not a std::exception (a failed REQUIRE?)";
        try {
          throw;
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {}
        std::lock_guard<std::mutex> lock(g.m);
        g.fail("rank " + std::to_string(r) + " failed: " + what);
      }
    });
  for (std::thread& t : threads) t.join();
  if (first < 0) return;
  try {
    std::rethrow_exception(errors[first]);
  } catch (const Error& e) {
    throw Error("rank " + std::to_string(first.load()) + ": " + e.what());
  }
}

}  // namespace tandem::dist
