// apps/trainer/run/export_weights.cpp: a checkpoint's model weights alone (see export_weights.h).
#include "apps/trainer/run/export_weights.h"

#include <map>

#include "core/check.h"          // defines: TANDEM_CHECK
#include "checkpoint/checkpoint.h"   // defines: read_checkpoint

namespace tandem::trainer {

ExportedWeights export_weights(const std::string& checkpoint, bool ema) {
  Checkpoint ck = read_checkpoint(checkpoint);
  std::map<std::string, Tensor> masters, averages;
  const std::string master_prefix = "amp.master.", ema_prefix = "ema.";
  for (const auto& [name, t] : ck.optimizer) {
    if (name.rfind(master_prefix, 0) == 0) masters[name.substr(master_prefix.size())] = t;
    if (name.rfind(ema_prefix, 0) == 0) averages[name.substr(ema_prefix.size())] = t;
  }
  TANDEM_CHECK(!ema || !averages.empty(), "'", checkpoint, "' holds no EMA of the weights: --ema exports the "
               "average that --model-ema keeps; train with --model-ema, or export without --ema");
  ExportedWeights out;
  out.model = ck.state.model;
  size_t from_masters = 0, from_ema = 0;
  for (auto& [name, t] : ck.model) {
    if (ema && averages.count(name)) {
      out.tensors.emplace_back(name, averages[name]), ++from_ema;
    } else if (masters.count(name)) {
      out.tensors.emplace_back(name, masters[name]), ++from_masters;
    } else {
      out.tensors.emplace_back(name, t);
    }
  }
  out.notes.push_back(std::to_string(out.tensors.size()) + " model tensors of " + out.model + " (step " +
                      std::to_string(ck.state.step) + "); " + std::to_string(ck.optimizer.size()) +
                      " optimizer tensors left out");
  if (from_ema) out.notes.push_back(std::to_string(from_ema) + " parameters are the EMA (--model-ema's average); "
                                    "the buffers are the checkpoint's");
  if (from_masters) out.notes.push_back(std::to_string(from_masters) + " parameters are AMP's f32 masters");
  return out;
}

}  // namespace tandem::trainer
