// apps/train/amp.cpp: the trainers' mixed precision (see amp.h).
#include "apps/train/amp.h"

#include "core/autocast.h"   // defines: amp_dtype_from_name
#include "dist/transport/bootstrap.h"  // defines: comm_for (the CPU communicator for the overflow flag)
#include "layers/amp_cast.h" // defines: cast_for_amp

namespace tandem::apps {
namespace {
const std::string kMaster = "amp.master.", kScaler = "amp.scaler.";
}  // namespace

std::unique_ptr<AmpRun> make_amp(DType low, Module& model) {
  auto amp = std::make_unique<AmpRun>();
  amp->low = low;
  optim::LossScalerOptions so;
  so.enabled = amp->low == DType::F16;  // bf16 has f32's exponent range: nothing to scale
  amp->scaler = optim::LossScaler(so);
  cast_for_amp(model, amp->low);
  return amp;
}

std::unique_ptr<AmpRun> make_amp(const std::string& name, Module& model) {
  if (name == "off") return nullptr;
  return make_amp(autocast::amp_dtype_from_name(name), model);
}

std::unique_ptr<AmpRun> make_amp(const TrainOptions& o, Module& model) { return make_amp(o.amp, model); }

bool any_rank_found_inf(bool found) {
  Tensor flag = Tensor::from_vector({found ? 1.0f : 0.0f}, {1});
  dist::comm_for(Device::cpu()).all_reduce(flag, dist::ReduceOp::Sum, "amp found_inf")->wait();
  return flag.item() > 0;
}

void build_masters(AmpRun& amp, Module& model, dist::Zero* zero) {
  amp.zero = zero;
  amp.master = std::make_unique<optim::MasterWeights>(zero ? zero->segments()
                                                           : optim::segments_from_parameters(model.named_parameters()));
}

std::unique_ptr<optim::Optimizer> make_amp_optimizer(const AmpRun& amp, const std::string& name,
                                                     const optim::OptimizerOptions& opts) {
  TANDEM_CHECK(amp.master, "internal: make_amp_optimizer before build_masters");
  // ZeRO's segments carry the parameter's index in the trainable list, which LAMB's norms key by.
  const int64_t n = amp.zero ? amp.zero->num_params() : static_cast<int64_t>(amp.master->size());
  return optim::make_optimizer(name, amp.master->master_segments(), n, opts);
}

bool amp_step(AmpRun& amp, optim::Optimizer& opt, double clip_grad_norm) {
  optim::AmpStepOptions so;
  so.clip_grad_norm = clip_grad_norm;
  // Under ZeRO each rank checks only its shard; under DDP the averaged gradients agree, but a rank
  // may still differ (a fault): one all-reduce of the flag keeps the decision common either way.
  so.found_inf_reduce = any_rank_found_inf;
  if (amp.zero) so.norm_reduce = amp.zero->sum_reduce();  // the global norm spans every rank's shard
  const bool applied = optim::amp_step(*amp.master, amp.scaler, opt,
                                       amp.zero ? amp.zero->grads() : amp.master->model_grads(), so);
  if (applied && amp.zero) amp.zero->gather_parameters();  // every rank's updated 16-bit shard to every rank
  return applied;
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

}  // namespace tandem::apps
