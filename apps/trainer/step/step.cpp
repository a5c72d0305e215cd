// apps/trainer/step/step.cpp: the Step's construction order, its three phases and its state (see step.h).
#include "apps/trainer/step/step.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "apps/trainer/step/ema.h"      // defines: ModelEma
#include "apps/trainer/step/ledger.h"   // defines: ledger_inputs, model_state_bytes
#include "apps/trainer/step/nonfinite.h"  // defines: agree_nonfinite, act_on_nonfinite, check_state_finite
#include "core/autograd.h"         // defines: NoGradGuard
#include "core/check.h"            // defines: TANDEM_CHECK
#include "core/ops/copy/copy.h"         // defines: cast_raw (AMP inputs)
#include "core/ops/copy/launch_count.h"  // defines: cast_launches, gemm_launches
#include "core/ops/elementwise/elementwise.h"  // defines: scale, add
#include "core/ops/finite/finite.h"       // defines: count_nonfinite

namespace tandem::trainer {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// The dtype of StepOptions::precision (F32: none).
DType low_dtype(Precision p) { return p == Precision::F16 ? DType::F16 : DType::BF16; }

// Where the model lives: its first parameter's device (a model without parameters: the CPU).
Device device_of(const Module& m) {
  const auto params = m.named_parameters();
  return params.empty() ? Device::cpu() : params.front().second.device();
}

// The options every optimizer group starts from: under ZeRO, LAMB's per-parameter norms span every
// rank's shard.
optim::OptimizerOptions group_options(const StepOptions& o, const dist::Zero* zero) {
  optim::OptimizerOptions oo = o.optimizer_options;
  if (zero) oo.norm_reduce = zero->sum_reduce();
  return oo;
}

}  // namespace

Step::Step(ModulePtr model, StepComms comms, StepOptions options, const Restore& restore, TpParts tp)
    : options_(std::move(options)), backend_(options_.backend), comm_(*comms.data), control_(*comms.control),
      model_(std::move(model)), device_(device_of(*model_)) {
  const StepOptions& o = options_;
  check(o);
  TANDEM_CHECK((o.tp > 1) == (tp.comm != nullptr) && (!tp.comm || tp.comm->size() == o.tp),
               "Step: StepOptions::tp is ", o.tp, " but the TP group passed has ",
               tp.comm ? tp.comm->size() : 0, " ranks: build the Step with TpParts{&grid.tp(), layout} of a "
               "dist::tp::Grid of that size (or tp = 1 and no TpParts)");
  check_on(o, device_of(*model_), comm_.backend());
  TANDEM_CHECK(control_.device().is_cpu(), "Step: StepComms::control must be a CPU communicator (the non-finite "
               "verdict and AMP's overflow flag are host values); this one is on ", control_.device().str());
  if (o.precision != Precision::F32) amp_ = make_amp(low_dtype(o.precision), *model_, control_);
  // The capturable update's loss scaler keeps scale, growth tracker, skipped count and found-inf
  // flag in tensors on the model's device (optim/loss_scaler.h, tensor mode), with the same rules;
  // built before load_state, which restores it like the host one (the same checkpoint entries).
  capturable_ = o.capturable || o.cuda_graph;
  if (amp_ && capturable_) {
    optim::LossScalerOptions so = amp_->scaler.options();
    so.device = device_of(*model_);
    amp_->scaler = optim::LossScaler(so);
  }
  optim::NamedTensors state = restore ? restore(*model_) : optim::NamedTensors{};
  // DDP, then the strategy over it (ZeRO builds its shards here), over the communicator the trainer
  // passed in.
  ddp_ = std::make_unique<dist::DistributedDataParallel>(model_, comm_, ddp_options(o));
  strategy_ = make_strategy(StrategyParts{*ddp_, *model_, comm_, options_}, std::move(tp));
  dist::Zero* zero = strategy_->zero();
  // The masters start from rank 0's broadcast 16-bit weights (of this rank's shard under ZeRO);
  // load_state's masters then replace them.
  if (amp_) build_masters(*amp_, *model_, zero);
  // The optimizer over the f32 masters (AMP: of the whole parameters, or of the ZeRO shard), or
  // what the strategy's ranks update (the whole parameters, or this rank's ZeRO segments). The lr
  // is the trainer's, set before every step.
  const optim::OptimizerOptions oo = group_options(o, zero);
  groups_ = amp_ ? make_amp_groups(*amp_, o.optimizer, oo, o.no_decay) : strategy_->make_groups(o, oo);
  strategy_->attach();  // the parameter server's servers
  load_state(std::move(state));
  if (amp_ && capturable_) skips_seen_ = amp_->scaler.skipped_steps();  // a resumed run's count: not this run's
  if (o.cuda_graph) graph_ = std::make_unique<GraphCapture>(device_);
  // A checkpoint loaded with NaN in it is caught at the first step's read, like a bad update.
  if (o.on_nonfinite != OnNonfinite::Off) pending_weights_ = ops::count_nonfinite(weights(), device_);
}

Step::~Step() = default;

void Step::set_lr(double lr) {
  groups_->set_lr(lr);
  strategy_->set_lr(lr);  // the parameter server's
}

double Step::lr() const { return groups_->lr(); }

Tensor Step::forward(const Tensor& x) {
  // AMP: the model computes in 16-bit from its first layer on (loaders yield f32 images).
  return (*ddp_)(amp_ && is_floating(x.dtype()) ? ops::cast_raw(x, amp_->low) : x);
}

void Step::zero_grad_body() {
  strategy_->zero_grad(*groups_);
}

void Step::zero_grad() {
  zero_grad_body();
  micro_ = 0;
  step_loss_ = Tensor();
}

void Step::backward_body(const Tensor& loss, bool last) {
  // Every rank, even with a bad loss: DDP's collectives must match across ranks. fp16 AMP scales
  // the loss so small gradients survive in 16-bit (optim/loss_scaler.h); accumulation divides it
  // by the micro-batches, so their summed gradients are the mean's (HF Trainer's rule). The host
  // form: one multiplication by the product, none at all when it is 1. The capturable form: by the
  // scale tensor on the device (no read of the scale; bf16's fixed 1: none), then by 1/n. The same
  // bits either way: the scale is a power of two, so scale x float(1/n) is float(scale / n).
  Tensor l = loss;
  if (amp_ && amp_->scaler.tensor_mode()) {
    if (amp_->scaler.options().enabled) l = amp_->scaler.scale_loss(l);
    if (options_.grad_accum_steps > 1) l = ops::scale(l, 1.0f / static_cast<float>(options_.grad_accum_steps));
  } else {
    const double factor = (amp_ ? amp_->scaler.scale() : 1.0) / options_.grad_accum_steps;
    if (factor != 1.0) l = ops::scale(loss, static_cast<float>(factor));
  }
  if (last) {
    l.backward();
  } else {
    auto local = ddp_->no_sync();  // this micro-batch's gradients stay on this rank, accumulated
    l.backward();
  }
}

void Step::backward(const Tensor& loss) {
  const int n = options_.grad_accum_steps;
  TANDEM_CHECK(!graph_, "Step::backward: a step captured as a CUDA graph runs whole: use Step::run");
  TANDEM_CHECK(micro_ < n, "Step::backward: this step's ", n, " micro-batch(es) already ran backward: call update() "
               "(StepOptions::grad_accum_steps = ", n, ")");
  backward_body(loss, micro_ + 1 == n);
  // The step's loss as reported: the loss itself, or the mean of the micro-batches' losses.
  autograd::NoGradGuard ng;
  if (n == 1) step_loss_ = loss.detach();
  else step_loss_ = step_loss_.defined() ? ops::add(step_loss_, ops::scale(loss.detach(), 1.0f / n))
                                         : ops::scale(loss.detach(), 1.0f / n);
  ++micro_;
}

bool Step::update_body(StepResult& r) {
  UpdateParts p{*groups_, amp_.get(), options_.clip_grad_norm, !graph_, &skips_seen_};
  return strategy_->update(p, r.grad_norm);
}

int64_t Step::skipped_unreported() {
  if (!graph_ || !amp_) return 0;
  return amp_->scaler.skipped_steps() - skips_seen_;
}

std::vector<Tensor> Step::checked_gradients() const {
  // Under AMP the loss scaler's unscale checks the 16-bit gradients itself (amp.h) and skips.
  if (amp_) return {};
  std::vector<Tensor> g;
  for (auto& [name, t] : strategy_->gradients())
    if (t.defined()) g.push_back(t);
  return g;
}

std::vector<Tensor> Step::weights(bool whole) const {
  // ZeRO-3: the parameters hold bytes only while their unit runs; this rank's shards are the
  // weights it owns (every rank checks its own, and the ranks agree on the sum).
  std::vector<Tensor> w = strategy_->parameters(whole);
  for (const auto& [name, b] : model_->named_buffers()) w.push_back(b);  // count_nonfinite skips integer ones
  return w;
}

bool Step::skip_nonfinite(int64_t number) {
  // The loss, the gradient count and the last update's weight count, gathered on the device and
  // read in one host read, then agreed on in one all-reduce (nonfinite.h: cost).
  autograd::NoGradGuard ng;
  Tensor health = Tensor::zeros({3}, DType::F32, device_);
  health.slice(0, 1).copy_(ops::cast_raw(step_loss_.view({1}), DType::F32));
  health.slice(1, 2).copy_(ops::cast_raw(ops::count_nonfinite(checked_gradients(), device_), DType::F32));
  if (pending_weights_.defined()) health.slice(2, 3).copy_(ops::cast_raw(pending_weights_, DType::F32));
  const std::vector<float> h = health.to_vector();
  pending_weights_ = Tensor();
  Health mine;
  mine.loss = h[0];
  mine.gradients = static_cast<int64_t>(h[1]);
  mine.weights = static_cast<int64_t>(h[2]);
  return act_on_nonfinite(options_.on_nonfinite, agree_nonfinite(control_, mine), number, options_.names);
}

StepResult Step::update() {
  TANDEM_CHECK(!graph_, "Step::update: a step captured as a CUDA graph runs whole: use Step::run");
  TANDEM_CHECK(micro_ == options_.grad_accum_steps, "Step::update after ", micro_, " of ",
               options_.grad_accum_steps, " micro-batches' backward (StepOptions::grad_accum_steps)");
  StepResult r;
  r.loss = step_loss_;
  const int64_t number = steps_done_ + 1;  // 1-based, as progress lines and messages count
  // Read after backward was queued, so the device has work while the host waits (nonfinite.h:
  // cost); not host work, so host_ms starts after it.
  const bool checked = options_.on_nonfinite != OnNonfinite::Off;
  if (checked && skip_nonfinite(number)) r.applied = false, r.skipped = StepResult::Skip::NonfiniteLoss;
  const Clock::time_point start = Clock::now();
  if (r.applied && !update_body(r)) r.applied = false, r.skipped = StepResult::Skip::NonfiniteGradients;
  // The weights this update left, counted on the device now and read with the next step's loss.
  // A skipped update changed nothing: the count from before still stands.
  if (checked && r.applied) pending_weights_ = ops::count_nonfinite(weights(), device_);
  r.host_ms = ms_since(start);
  if (r.applied) after_update();  // outside host_ms, as when the loops did it
  micro_ = 0;
  ++steps_done_;
  return r;
}

void Step::finish() {
  if (options_.on_nonfinite == OnNonfinite::Off) return;
  Health mine;
  if (pending_weights_.defined()) mine.weights = pending_weights_.to_vector_i64()[0];
  pending_weights_ = Tensor();
  // Reported as the state before the next step: the one a resumed run would start from.
  act_on_nonfinite(options_.on_nonfinite, agree_nonfinite(control_, mine), steps_done_ + 1, options_.names);
}

void Step::check_state_finite(const optim::NamedTensors& state) {
  int64_t bad = 0;
  if (comm_.rank() == 0) {
    // One count per device the tensors are on (the optimizer state may be gathered on the host).
    std::vector<Tensor> here, host;
    for (const Tensor& t : weights(true)) (t.device() == device_ ? here : host).push_back(t);
    for (const auto& [name, t] : state) (t.device() == device_ ? here : host).push_back(t);
    bad = ops::count_nonfinite(here, device_).to_vector_i64()[0];
    if (!host.empty() && !device_.is_cpu()) bad += ops::count_nonfinite(host, Device::cpu()).to_vector_i64()[0];
  }
  pending_weights_ = Tensor();  // rank 0 counted the same weights, and every rank holds them alike
  trainer::check_state_finite(control_, bad, steps_done_, "write to a checkpoint", options_.names);
}

namespace {
// What the step between two snapshots of the launch counters launched.
struct LaunchSnapshot {
  ops::LaunchCounter::Counts casts = ops::cast_launches().snapshot();
  ops::LaunchCounter::Counts gemms = ops::gemm_launches().snapshot();
  ops::LaunchCounter::Counts misaligned = ops::misaligned_gemm_launches().snapshot();
};

LaunchCounts launches_since(const LaunchSnapshot& before) {
  using C = ops::LaunchCounter;
  const LaunchSnapshot now;
  const C::Counts casts = C::minus(now.casts, before.casts), gemms = C::minus(now.gemms, before.gemms);
  LaunchCounts n;
  n.casts = C::total(casts);
  n.cast_pairs = C::summary(casts);
  n.gemms = C::total(gemms);
  n.f32_gemms = C::count(gemms, DType::F32, DType::F32);
  n.misaligned_gemms = C::total(C::minus(now.misaligned, before.misaligned));
  return n;
}
}  // namespace

StepResult Step::run(const ForwardLoss& forward_loss) {
  if (graph_) return run_graphed(forward_loss);
  const LaunchSnapshot before;
  const Clock::time_point start = Clock::now();
  zero_grad();
  for (int m = 0; m < options_.grad_accum_steps; ++m) backward(forward_loss(m));
  const double issue_ms = ms_since(start);
  StepResult r = update();
  r.host_ms += issue_ms;
  r.launches = last_launches_ = launches_since(before);
  return r;
}

// The same phases as run(), captured (refusal() left nothing in them that reads the host: no
// non-finite check, one micro-batch, plain DDP, and the update in its capturable form). The
// host-side bookkeeping stays outside the body, which replays do not run.
StepResult Step::run_graphed(const ForwardLoss& forward_loss) {
  const Clock::time_point start = Clock::now();
  const LaunchSnapshot before;
  StepResult r;
  const GraphCapture::Ran ran = graph_->run([&] {
    zero_grad_body();
    Tensor loss = forward_loss(0);
    backward_body(loss, true);
    update_body(r);
    if (!static_loss_.defined()) static_loss_ = loss.detach().clone();  // the first (eager) step
    else static_loss_.copy_(loss.detach());
  });
  r.replayed = ran != GraphCapture::Ran::Eager;
  r.captured = ran == GraphCapture::Ran::Captured;
  // A replay launches what the capture recorded: the captured (or eager) step's counts stand for it.
  if (!r.replayed || r.captured) last_launches_ = launches_since(before);
  r.launches = last_launches_;
  r.host_ms = ms_since(start) - (r.captured ? graph_->capture_ms() : 0.0);
  r.loss = static_loss_;
  after_update();  // a graphed step counts as applied (StepResult::applied stays true)
  if (r.captured && control_.rank() == 0)
    std::printf("cuda graph: captured step %lld (%zu nodes) in %.1f ms after %d eager steps; replaying it from "
                "here on\n", (long long)steps_done_ + 1, graph_->nodes(), graph_->capture_ms(), graph_->warmup());
  ++steps_done_;
  // A replay's collectives were captured, not issued, so dist's watchdog does not see them: the
  // replay is handed to it as a whole (an event after it on the compute stream), and a hung or
  // faulted replay then aborts every rank, naming the rank, like any collective.
  if (r.replayed) comm_.watch_compute("replayed step " + std::to_string(steps_done_));
  return r;
}

void Step::after_update() {
  if (ema_) ema_->update();
  for (const auto& hook : post_update_) hook();
}

namespace {

// Micro-batch m of n: rows [m R/n, (m + 1) R/n) of each tensor (the tensors themselves when n is 1).
std::vector<Tensor> micro_rows(const std::vector<Tensor>& batch, int m, int n) {
  if (n == 1) return batch;
  std::vector<Tensor> out;
  for (const Tensor& t : batch) {
    const int64_t rows = t.shape()[0];
    TANDEM_CHECK(rows % n == 0, "a batch of ", rows, " rows does not split into ", n,
                 " equal micro-batches (grad_accum_steps): pass full batches");
    out.push_back(t.slice(m * rows / n, (m + 1) * rows / n));
  }
  return out;
}

}  // namespace

StepResult Step::run(const std::vector<Tensor>& batch, const BatchLoss& loss) {
  batch_bytes_ = 0;
  for (const Tensor& t : batch) batch_bytes_ += t.nbytes();
  const std::vector<Tensor>& in = graph_ ? stage(batch) : batch;
  if (!graph_) kept_.clear();  // a replay keeps its static outputs
  const int n = options_.grad_accum_steps;
  StepResult r = run([&](int m) {
    keep_slot_ = 0;
    return loss(micro_rows(in, m, n), m);
  });
  r.kept = kept_;
  return r;
}

Tensor Step::keep(const Tensor& output) {
  const size_t i = keep_slot_++;
  Tensor d = output.detach();
  if (kept_.size() <= i) kept_.push_back(graph_ ? d.clone() : d);  // cuda_graph: from the first (eager) step
  else if (graph_) kept_[i].copy_(d);  // the same address every replay
  else kept_[i] = d;                   // a later micro-batch's
  return kept_[i];
}

const std::vector<Tensor>& Step::stage(const std::vector<Tensor>& batch) {
  if (static_batch_.empty())
    for (const Tensor& t : batch) static_batch_.push_back(Tensor::empty_like(t));
  TANDEM_CHECK(batch.size() == static_batch_.size(), "a captured step reads ", static_batch_.size(),
               " batch tensors, not ", batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    TANDEM_CHECK(batch[i].shape() == static_batch_[i].shape(), option_name(options_.names, "cuda_graph"),
                 " replays a step of fixed shape, but this batch has ", batch[i].str(), " where the captured "
                 "step took ", static_batch_[i].str(), ": every batch must be full (drop the last incomplete one)");
    static_batch_[i].copy_(batch[i]);  // stream-ordered before the step's kernels
  }
  return static_batch_;
}

int64_t Step::static_batch_bytes() const {
  int64_t bytes = 0;
  for (const Tensor& t : static_batch_) bytes += t.nbytes();
  return bytes;
}

optim::NamedTensors Step::state() {
  // Without ZeRO nothing is collective: only rank 0 assembles (the parameter server refuses).
  if (!strategy_->takes_part_in_state(comm_.rank())) return {};
  optim::NamedTensors s = groups_->state();  // ZeRO: gathered onto rank 0, bucket by bucket
  // AMP: the f32 masters (gathered from the shards under ZeRO, also collective) and the loss scale.
  if (amp_)
    for (auto& e : amp_state(*amp_)) s.push_back(std::move(e));
  return strategy_->canonical_state(std::move(s));  // TP: assembled over the TP group
}

void Step::load_state(optim::NamedTensors state) {
  if (state.empty()) return;  // a fresh start: the masters already hold the model's weights
  state = strategy_->local_state(std::move(state));  // TP: this rank's shard of the canonical entries
  take_amp_state(amp_.get(), state);  // the "amp.*" entries: masters and loss scale (or none)
  if (!state.empty()) groups_->load_state(state);
}

dist::LedgerOptions Step::ledger_options() {
  dist::LedgerOptions lo = ledger_inputs(*ddp_, strategy_->zero(), comm_.size());
  lo.mixed = amp_ != nullptr;  // 16-bit parameters and gradients, f32 masters (of the shard under ZeRO)
  lo.tp = options_.tp;         // Ψ: the TP shards this rank holds, N: the DP ranks (comm_)
  // f32 state per parameter: Adam's two moments, SGD's momentum buffer (none without momentum).
  lo.state_bytes = options_.optimizer != "sgd" ? 8 : options_.optimizer_options.momentum != 0 ? 4 : 0;
  return lo;
}

int64_t Step::model_state_bytes() {
  return trainer::model_state_bytes(*ddp_, strategy_->zero(), (amp_ ? amp_->master->bytes() : 0) + groups_->state_bytes());
}

}  // namespace tandem::trainer
