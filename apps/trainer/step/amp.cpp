// apps/trainer/step/amp.cpp: the Step's mixed precision (see amp.h).
#include "apps/trainer/step/amp.h"

#include "layers/amp_cast.h"  // defines: cast_for_amp

namespace tandem::trainer {
namespace {
const std::string kMaster = "amp.master.", kScaler = "amp.scaler.";
}  // namespace

std::unique_ptr<AmpRun> make_amp(DType low, Module& model, dist::Communicator& control) {
  TANDEM_CHECK(low == DType::BF16 || low == DType::F16, "make_amp: mixed precision computes in bf16 or f16, not ",
               dtype_name(low));
  auto amp = std::make_unique<AmpRun>();
  amp->low = low;
  amp->control = &control;
  optim::LossScalerOptions so;
  so.enabled = amp->low == DType::F16;  // bf16 has f32's exponent range: nothing to scale
  amp->scaler = optim::LossScaler(so);
  cast_for_amp(model, amp->low);
  return amp;
}

bool any_rank_found_inf(dist::Communicator& control, bool found) {
  Tensor flag = Tensor::from_vector({found ? 1.0f : 0.0f}, {1});
  control.all_reduce(flag, dist::ReduceOp::Sum, "amp found_inf")->wait();
  return flag.item() > 0;
}

void build_masters(AmpRun& amp, Module& model, dist::Zero* zero) {
  amp.zero = zero;
  amp.master = std::make_unique<optim::MasterWeights>(zero ? zero->segments()
                                                           : optim::segments_from_parameters(model.named_parameters()));
}

std::unique_ptr<ParamGroups> make_amp_groups(const AmpRun& amp, const std::string& kind,
                                             const optim::OptimizerOptions& opts, const NoDecayRule& no_decay) {
  TANDEM_CHECK(amp.master, "internal: make_amp_groups before build_masters");
  // ZeRO's segments carry the parameter's index in the trainable list, which LAMB's norms key by.
  if (amp.zero) return std::make_unique<ParamGroups>(kind, amp.master->master_segments(), *amp.zero, opts, no_decay);
  return std::make_unique<ParamGroups>(kind, amp.master->master_segments(),
                                       static_cast<int64_t>(amp.master->size()), opts, no_decay);
}

bool amp_step(AmpRun& amp, ParamGroups& opt, double clip_grad_norm, double* grad_norm, const ClipFn& clip) {
  // The 16-bit gradients: whole parameters' (DDP), or this rank's shard views (ZeRO).
  const bool found = amp.master->unscale_and_check(amp.zero ? amp.zero->grads() : amp.master->model_grads(),
                                                   1.0 / amp.scaler.scale());
  // Under ZeRO each rank checks only its shard; under DDP the averaged gradients agree, but a rank
  // may still differ (a fault): one all-reduce of the flag keeps the decision common either way.
  if (!amp.scaler.update(any_rank_found_inf(*amp.control, found))) return false;
  opt.set_grads(amp.master->master_grads());
  // After the skip decision, so a skipped step stays skipped and a clean one clips by the true
  // (unscaled) norm, summed over the shards under ZeRO.
  if (clip_grad_norm > 0) {
    const double norm = clip ? clip(clip_grad_norm) : opt.clip_grad_norm(clip_grad_norm);
    if (grad_norm) *grad_norm = norm;
  }
  opt.step();  // the update writes the 16-bit parameters too (optim/amp.h): no copy-back pass
  if (amp.zero) amp.zero->gather_parameters();  // every rank's updated 16-bit shard to every rank
  return true;
}

optim::NamedTensors amp_state(const AmpRun& amp, int root) {
  optim::NamedTensors state;
  const std::vector<optim::StateSlice> slices = amp.master->state_slices();
  for (auto& [name, t] : amp.zero ? amp.zero->gather_slices(slices, root) : optim::assemble_state(slices))
    state.emplace_back(kMaster + name, t);
  for (auto& [name, t] : amp.scaler.state()) state.emplace_back(kScaler + name, t);
  return state;
}

void take_amp_state(AmpRun* amp, optim::NamedTensors& state) {
  optim::NamedTensors masters, scaler, rest;
  for (auto& [name, t] : state) {
    if (name.rfind(kMaster, 0) == 0)
      masters.emplace_back(name.substr(kMaster.size()), t);
    else if (name.rfind(kScaler, 0) == 0)
      scaler.emplace_back(name.substr(kScaler.size()), t);
    else
      rest.emplace_back(name, t);
  }
  state = std::move(rest);
  if (!amp) return;  // an AMP checkpoint resumed in f32: the model's weights are the 16-bit ones
  if (!masters.empty()) amp->master->load_state(masters);  // each rank its own range (its shard under ZeRO)
  else amp->master->copy_from_model();  // an f32 checkpoint: the masters start from its weights
  amp->scaler.load_state(scaler);
}

}  // namespace tandem::trainer
