// apps/trainer/run/start_weights.cpp: --weights for both trainers (see start_weights.h).
#include "apps/trainer/run/start_weights.h"

#include <cstdio>

#include "apps/trainer/run/run_folder.h"  // defines: UsageError
#include "core/check.h"               // defines: Error

namespace tandem::trainer {

std::string start_weights_line(const std::string& path, const WeightsResult& r) {
  std::string s = "weights: " + path + " (" +
                  (r.format == WeightsFormat::Checkpoint
                       ? "a tandem checkpoint, step " + std::to_string(r.checkpoint_step) + ", its model tensors"
                       : std::string("a state dict")) +
                  "): " + std::to_string(r.loaded.size()) + " tensors loaded";
  if (!r.skipped.empty()) {
    s += "; " + std::to_string(r.skipped.size()) + " kept at their initialisation (--weights-skip):";
    for (size_t i = 0; i < r.skipped.size(); ++i) s += (i ? ", " : " ") + r.skipped[i];
  }
  return s;
}

WeightsResult load_start_weights(const std::string& path, Module& model, const std::vector<std::string>& skip,
                                 const WeightsRemap& remap, bool print) {
  WeightsOptions wo;
  wo.skip = skip;
  wo.remap = remap;
  wo.skip_name = "--weights-skip";
  WeightsResult r;
  try {
    r = load_weights(path, model, wo);
  } catch (const Error& e) {
    // The same file and model on every rank: every rank refuses alike, rank 0 says it once.
    throw UsageError(std::string("--weights: ") + e.what());
  }
  if (print) {
    std::printf("%s\n", start_weights_line(path, r).c_str());
    // The notes that matter to a user (casts, absent counters); the skipped list is in the line.
    for (const std::string& n : r.notes)
      if (n.rfind("kept at their initial values", 0) != 0) std::printf("weights: note: %s\n", n.c_str());
    std::fflush(stdout);
  }
  return r;
}

}  // namespace tandem::trainer
