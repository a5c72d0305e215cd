// apps/train/memory.h: train_imagenet's memory ledger - predicted (dist/measure/memory_ledger.h) and measured.
//
// plan_memory (end of set-up) predicts this rank's bytes from the parameter count, --zero, the world
// size and --optimizer, and notes what the allocator already holds beside the model state (data
// sets, loaders). measure_memory (after the first step, when the optimizer state exists) reads the
// allocator: current bytes minus that, minus the data batches held at that moment (the loaders'
// prefetched batches, the resident synthetic batch, the step's own batch and --cuda-graph's static
// copy of it: up to prefetch + 2 batches, 4.5 MiB against resnet_tiny's 3.6 MiB of state in the
// default job, 77 MiB per batch at ResNet-50's 128 x 224^2), are the model state (plus the step's
// last logits and loss, a few KiB).
// The peak is read at the end of the run and counts everything. Printed at start-up (predicted) and
// in the summary; written into --metrics as "memory_ledger".
#pragma once
#include <nlohmann/json.hpp>

namespace tandem::data {
struct Batch;
}

namespace tandem::apps {

struct Training;
struct TrainOptions;

void plan_memory(const TrainOptions& o, Training& t);
void measure_memory(Training& t, const data::Batch& in_hand);  // once; later calls do nothing
void measure_peak(Training& t);    // at the end of the run
nlohmann::json memory_json(const Training& t);

}  // namespace tandem::apps
