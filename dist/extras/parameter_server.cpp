// dist/extras/parameter_server.cpp: partitions, push (reduce to the server), update, pull (broadcast).
#include "dist/extras/parameter_server.h"

#include <algorithm>
#include <numeric>

#include "core/autograd.h"
#include "core/ops/elementwise/elementwise.h"
#include "core/profile.h"

namespace tandem::dist {

std::vector<int> assign_partitions(const std::vector<int64_t>& numels, int servers) {
  TANDEM_CHECK(servers >= 1, "a parameter server needs at least one server, got ", servers);
  std::vector<size_t> order(numels.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first: the classic greedy for balancing (each placement can only shrink the imbalance
  // the big tensors left). stable_sort keeps model order among equal sizes: deterministic.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int64_t> load(static_cast<size_t>(servers), 0);
  std::vector<int> server(numels.size(), 0);
  for (size_t i : order) {
    const int s = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());  // first minimum
    server[i] = s;
    load[static_cast<size_t>(s)] += numels[i];
  }
  return server;
}

ParameterServer::ParameterServer(optim::NamedTensors params, Communicator& comm, PsOptions options)
    : params_(std::move(params)), comm_(comm), options_(std::move(options)) {
  const int n = comm_.size(), k = options_.servers;
  TANDEM_CHECK(k >= 1 && k <= n, "[servers ", k, "] must be between 1 and the number of ranks (", n,
               "): servers are colocated on ranks 0..K-1");
  TANDEM_CHECK(!params_.empty(), "the parameter server got no parameters");
  const Device dev = params_.front().second.device();
  std::vector<int64_t> numels;
  for (auto& [name, p] : params_) {
    TANDEM_CHECK(p.dtype() == DType::F32 && p.device() == dev, "parameter server: ", name, " is ", p.str(),
                 "; every parameter must be f32 on ", dev.str(), " (the servers update in f32: no mixed precision)");
    numels.push_back(p.numel());
  }
  server_of_ = assign_partitions(numels, k);

  autograd::NoGradGuard ng;
  // Every replica starts from rank 0's values, as in DDP: then each server's partition is the same
  // on every rank, and the pulls below keep it so.
  {
    std::vector<WorkPtr> works;
    for (auto& [name, p] : params_) {
      Tensor data = p.detach();
      works.push_back(comm_.broadcast(data, 0, "ps initial broadcast"));
    }
    for (auto& w : works) w->wait();
  }

  // One pair of flat buffers per partition: one message per server and direction each step.
  parts_.resize(static_cast<size_t>(k));
  for (size_t i = 0; i < params_.size(); ++i) {
    Partition& part = parts_[static_cast<size_t>(server_of_[i])];
    const int64_t at = part.offsets.empty() ? 0 : part.offsets.back() + params_[part.params.back()].second.numel();
    part.params.push_back(i);
    part.offsets.push_back(at);
  }
  for (Partition& part : parts_) {
    const int64_t total = part.offsets.empty() ? 0 : part.offsets.back() + params_[part.params.back()].second.numel();
    part.grads = Tensor::zeros({total}, DType::F32, dev);
    part.values = Tensor::zeros({total}, DType::F32, dev);
  }

  // A server's optimizer updates 1-D views into its partition's flat buffers: the server's `values`
  // are the authoritative parameters, and its `grads` receive the pushed sums.
  const int r = comm_.rank();
  if (r >= k) return;  // a worker only: no optimizer, no state
  Partition& mine = parts_[static_cast<size_t>(r)];
  std::vector<optim::ParamSegment> segs, no_decay_segs;
  for (size_t j = 0; j < mine.params.size(); ++j) {
    const size_t i = mine.params[j];
    const int64_t lo = mine.offsets[j], hi = lo + params_[i].second.numel();
    optim::ParamSegment s;
    s.name = params_[i].first;
    s.param = mine.values.slice(lo, hi);
    s.grad = mine.grads.slice(lo, hi);
    s.param_index = static_cast<int64_t>(i);
    (options_.no_decay && options_.no_decay(s.name) ? no_decay_segs : segs).push_back(std::move(s));
  }
  const int64_t count = static_cast<int64_t>(params_.size());
  optimizer_ = optim::make_optimizer(options_.optimizer, std::move(segs), count, options_.optimizer_options);
  if (!options_.no_decay) return;
  optim::OptimizerOptions without = options_.optimizer_options;
  without.weight_decay = 0.0;
  no_decay_optimizer_ = optim::make_optimizer(options_.optimizer, std::move(no_decay_segs), count, without);
}

ParameterServer::~ParameterServer() = default;

void ParameterServer::set_lr(double lr) {
  options_.optimizer_options.lr = lr;
  if (optimizer_) optimizer_->set_lr(lr);
  if (no_decay_optimizer_) no_decay_optimizer_->set_lr(lr);
}

// This rank's gradients of the partition, into its flat push buffer (zeros for a missing gradient:
// the server's sum then counts this rank as contributing nothing, as DDP's zero-filled bucket does).
void ParameterServer::pack_grads(Partition& part) {
  for (size_t j = 0; j < part.params.size(); ++j) {
    const Tensor& p = params_[part.params[j]].second;
    Tensor dst = part.grads.slice(part.offsets[j], part.offsets[j] + p.numel());
    if (p.grad().defined()) dst.copy_(p.grad().view({p.numel()}));
    else dst.zero_();
  }
}

void ParameterServer::unpack_values(const Partition& part) {
  for (size_t j = 0; j < part.params.size(); ++j) {
    const Tensor& p = params_[part.params[j]].second;
    p.detach().view({p.numel()}).copy_(part.values.slice(part.offsets[j], part.offsets[j] + p.numel()));
  }
}

namespace {
// Push and pull move each partition in pieces of at most PsOptions::piece_bytes: MPICH's nonblocking reduce
// copies a message into a temporary of its size (the sender's too), and glibc maps every block of
// 32 MiB and more anew (core/host_cache.h), so whole-partition messages cost a page fault per 4 KiB
// every step - ResNet-18's 45 MB partition 16,000 faults per step on a worker, bert_small's 69 MB
// about 65 ms of a 454 ms step at 10 Gbit/s (apps/results/2026-11-28-cpu-2core/emulated_links_3).
// Pieces of 16 MiB (the default: half that threshold) reuse glibc's kept heap, and are still
// megabytes, where a link's bandwidth is reached (apps/bench_allreduce). Elementwise sums: the
// pieces give the bits the whole message gives (tests/mpi_parameter_server.cpp).

// [begin, end) of each piece of a partition of `numel` f32 elements.
std::vector<std::pair<int64_t, int64_t>> pieces(int64_t numel, size_t piece_bytes) {
  const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(piece_bytes / 4));
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t a = 0; a < numel; a += step) out.emplace_back(a, std::min(numel, a + step));
  return out;
}
}  // namespace

void ParameterServer::step(Timeline* timeline) {
  autograd::NoGradGuard ng;
  const int r = comm_.rank(), n = comm_.size();
  const bool record = timeline != nullptr && timeline->step_started();
  MarkPtr backward_end = record ? comm_.mark() : nullptr;
  std::vector<std::pair<WorkPtr, int64_t>> push, pull;  // each piece's collective and its bytes
  // The pieces' views of the partitions' flat buffers, alive until the step ends (reserved: a
  // collective may keep a reference to its tensor).
  std::vector<Tensor> views;
  size_t n_pieces = 0;
  for (const Partition& part : parts_) n_pieces += pieces(part.grads.numel(), options_.piece_bytes).size();
  views.reserve(2 * n_pieces);

  {  // 1. push: every rank's partition s is summed at server s. All K reduces are in flight at once.
    profile::Range range("ps push");
    for (size_t s = 0; s < parts_.size(); ++s) {
      pack_grads(parts_[s]);
      for (auto [a, b] : pieces(parts_[s].grads.numel(), options_.piece_bytes)) {
        views.push_back(parts_[s].grads.slice(a, b));
        push.emplace_back(comm_.reduce(views.back(), static_cast<int>(s), ReduceOp::Sum,
                                       "ps push server " + std::to_string(s)), (b - a) * 4);
      }
    }
    for (auto& w : push) w.first->wait();
  }

  if (optimizer_) {  // 2. update: only the server's own partition, with the mean gradient
    Partition& mine = parts_[static_cast<size_t>(r)];
    ops::scale_(mine.grads, 1.0f / static_cast<float>(n));  // sum, then divide: exact as DDP's average
    // The server's values are its model's parameters (refreshed here, in case the caller changed
    // them, e.g. a restored checkpoint); the optimizer updates them through its segment views.
    for (size_t j = 0; j < mine.params.size(); ++j) {
      const Tensor& p = params_[mine.params[j]].second;
      mine.values.slice(mine.offsets[j], mine.offsets[j] + p.numel()).copy_(p.detach().view({p.numel()}));
    }
    optimizer_->step();
    if (no_decay_optimizer_) no_decay_optimizer_->step();
  }

  {  // 3. pull: server s broadcasts its partition; every rank (the server too) copies it into the model.
    profile::Range range("ps pull");
    std::vector<size_t> last;  // per partition: one past its last piece in `pull`
    for (size_t s = 0; s < parts_.size(); ++s) {
      for (auto [a, b] : pieces(parts_[s].values.numel(), options_.piece_bytes)) {
        views.push_back(parts_[s].values.slice(a, b));
        pull.emplace_back(comm_.broadcast(views.back(), static_cast<int>(s), "ps pull server " + std::to_string(s)),
                          (b - a) * 4);
      }
      last.push_back(pull.size());
    }
    for (size_t s = 0, i = 0; s < parts_.size(); ++s) {
      for (; i < last[s]; ++i) pull[i].first->wait();
      unpack_values(parts_[s]);
    }
  }

  if (!record) return;
  // Both directions as "buckets" of the step, ready when backward ended: nothing is hidden, which is
  // exactly what the reducer's overlap buys and this baseline lacks.
  for (auto& [w, bytes] : push) timeline->bucket_done(backward_end, *w, bytes);
  for (auto& [w, bytes] : pull) timeline->bucket_done(backward_end, *w, bytes);
  timeline->end_step(backward_end);
}

}  // namespace tandem::dist
