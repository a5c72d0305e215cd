// apps/train/report.h: what train_imagenet prints and writes - progress lines, the opening and
// closing lines, and the JSON summary (--metrics).
//
// Progress lines cover the interval since the previous line (averages, not one step), because the
// loop does not synchronise with the GPU inside an interval: the host runs ahead and only a sync at
// the interval's end makes wall time equal GPU time. Split of ms/step:
//   data     = time next() blocked waiting for the loader (host-measured, exact);
//   exposed  = communication that backward did not hide (dist/measure/timeline.h, from events);
//   compute  = the rest (forward, backward, optimizer, launch overheads).
// The summary separates init time (process start -> first step) from training time, and steady
// images/s (first --bench-warmup steps excluded) from the whole-run rate (apps/trainer/run/clock.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/train/options.h"     // defines: TrainOptions
#include "apps/train/validation.h"  // defines: EvalResult
#include "apps/trainer/run/clock.h"     // defines: RunClock
#include "apps/trainer/run/position.h"  // defines: Position
#include "apps/trainer/run/run_log.h"   // defines: Eta
#include "core/device.h"            // defines: Device
#include "dist/measure/timeline.h"  // defines: Timeline

namespace tandem::apps {

struct Training;

// One progress interval, averaged per step.
struct Interval {
  int64_t steps = 0;
  double wall_ms = 0, data_ms = 0, exposed_ms = 0, overlap = 1;
  double loss = 0, top1 = 0;  // global means over the interval's samples (top1: last batch only)
  double images_per_s = 0;    // global
  int64_t skipped_steps = 0;  // steps skipped so far in this run (--on-nonfinite skip, AMP overflow)
  double loss_scale = 0;      // --amp: the loss scale after the interval (1 for bf16); 0: no AMP
  double host_ms = 0;         // host time issuing the interval's steps (RunClock::interval_host_ms)
  int64_t graph_steps = 0;    // of `steps`, those replayed as a CUDA graph (--cuda-graph)
  double graph_host_ms = 0;   // the part of host_ms spent issuing those replays
  double step_ms() const { return steps ? wall_ms / steps : 0; }
  double compute_ms() const { return steps ? (wall_ms - data_ms) / steps - exposed_ms : 0; }
  double host_step_ms() const { return steps ? host_ms / steps : 0; }
};


// "epoch E step S/T | loss ... | lr ... | img/s | ms/step split | mem" for one interval (the loop
// appends " | elapsed ... eta ...", apps/trainer/run/run_log.h, at the end).
std::string progress_line(int64_t epoch, int64_t step, int64_t total, double lr, const Interval& iv, int world,
                          Device dev);

// The summary's history: where the run stood at an epoch's end.
struct EpochRecord {
  int64_t epoch = 0, step = 0;
  double lr = 0, train_loss = 0, train_top1 = 0;  // train_*: the epoch's last progress interval
  std::optional<EvalResult> val;                   // when this epoch was validated
};

// What a run accumulates for its report.
struct RunRecord {
  Interval last;          // the latest progress interval
  EvalResult last_eval;   // the latest validation (zeros when none ran)
  std::vector<EpochRecord> history;
  int64_t checkpoints_written = 0;  // RunControl::saves() at the end
  int64_t skipped_steps = 0;  // steps whose update every rank skipped (non-finite loss or AMP gradient)
  int64_t bad_labels = 0;     // labels outside [0, classes) the CUDA loss clamped, all ranks (loop.cpp)
  double compute_s = 0;       // this rank's own compute time (apps/train/stragglers.h)
};

// "<model> on N rank(s) (...), params, batch, steps, lr", the LR rule, the memory ledger (rank 0).
void print_start(const TrainOptions& o, const Training& t);

// The run's records beside its checkpoints (rank 0; apps/trainer/run/run_log.h, cli.h): the effective
// configuration into <checkpoint-dir>/config_<run-id>.toml, and the --log-file (default <checkpoint-
// dir>/log_<run-id>.jsonl) opened with its "start" record. Call once, after set_up.
void start_records(const TrainOptions& o, Training& t);
// The "step" record of a progress interval that ended at `pos` (epoch `epoch`).
void log_step(Training& t, int64_t epoch, const trainer::Position& pos, const Interval& iv, const trainer::Eta& eta);
// The "val" record of a validation at an epoch's end.
void log_validation(Training& t, const EpochRecord& e, int64_t samples);

// After the last step (clock stopped): writes the --trace, sums the ranks' unreadable files and
// gathers their compute times (all ranks take part), then on rank 0 prints the "done:" line (with
// the skipped files) and the straggler line, and writes the --metrics JSON.
void report(const TrainOptions& o, Training& t, const trainer::RunClock& clock, const RunRecord& rec, int64_t step);

}  // namespace tandem::apps
