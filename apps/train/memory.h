// apps/train/memory.h: train_imagenet's memory ledger - predicted (dist/memory_ledger.h) and measured.
//
// plan_memory (end of set-up) predicts this rank's bytes from the parameter count, --zero, the world
// size and --optimizer, and notes what the allocator already holds beside the model state (data
// sets, loaders, the resident synthetic batch). measure_memory (after the first step, when the
// optimizer state exists) reads the allocator: current bytes minus that are the model state (plus
// the step's last logits and loss, a few KiB). The peak is read at the end of the run. Printed at
// start-up (predicted) and in the summary; written into --metrics as "memory_ledger".
#pragma once
#include <nlohmann/json.hpp>

namespace tandem::apps {

struct Training;
struct TrainOptions;

void plan_memory(const TrainOptions& o, Training& t);
void measure_memory(Training& t);  // once; later calls do nothing
void measure_peak(Training& t);    // at the end of the run
nlohmann::json memory_json(const Training& t);

}  // namespace tandem::apps
