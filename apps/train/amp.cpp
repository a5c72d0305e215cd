// apps/train/amp.cpp: train_imagenet's mixed precision (see amp.h).
#include "apps/train/amp.h"

#include "core/autocast.h"   // defines: amp_dtype_from_name
#include "dist/bootstrap.h"  // defines: comm_for (the CPU communicator for the overflow flag)
#include "layers/amp_cast.h" // defines: cast_for_amp

namespace tandem::apps {
namespace {
const std::string kMaster = "amp.master.", kScaler = "amp.scaler.";
}  // namespace

std::unique_ptr<AmpRun> make_amp(const TrainOptions& o, Module& model) { return make_amp(o.amp, model); }

std::unique_ptr<AmpRun> make_amp(const std::string& name, Module& model) {
  if (name == "off") return nullptr;
  auto amp = std::make_unique<AmpRun>();
  amp->low = autocast::amp_dtype_from_name(name);
  optim::LossScalerOptions so;
  so.enabled = amp->low == DType::F16;  // bf16 has f32's exponent range: nothing to scale
  amp->scaler = optim::LossScaler(so);
  cast_for_amp(model, amp->low);
  amp->master = std::make_unique<optim::MasterWeights>(optim::segments_from_parameters(model.named_parameters()));
  return amp;
}

bool any_rank_found_inf(bool found) {
  Tensor flag = Tensor::from_vector({found ? 1.0f : 0.0f}, {1});
  dist::comm_for(Device::cpu()).all_reduce(flag, dist::ReduceOp::Sum, "amp found_inf")->wait();
  return flag.item() > 0;
}

bool amp_step(AmpRun& amp, optim::Optimizer& opt) {
  return optim::amp_step(*amp.master, amp.scaler, opt, amp.master->model_grads(), any_rank_found_inf);
}

void add_amp_state(const AmpRun& amp, optim::NamedTensors& state) {
  for (auto& [name, t] : optim::assemble_state(amp.master->state_slices())) state.emplace_back(kMaster + name, t);
  for (auto& [name, t] : amp.scaler.state()) state.emplace_back(kScaler + name, t);
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
  if (!masters.empty()) amp->master->load_state(masters);
  else amp->master->copy_from_model();  // an f32 checkpoint: the masters start from its weights
  amp->scaler.load_state(scaler);
}

}  // namespace tandem::apps
