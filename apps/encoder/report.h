// apps/encoder/report.h: what train_encoder prints and writes - the opening lines (corpus, model,
// baseline), progress lines, validation lines beside the unigram baseline, the done line and the
// JSON summary (--metrics).
//
// A progress line covers the interval since the previous one (the loop does not synchronise with
// the device inside an interval; see apps/trainer/run/clock.h):
//   sequences/s and tokens/s (tokens = sequences x --seq-len), in total and per rank;
//   MFU = model FLOPs per second per rank / the rank's peak (apps/encoder/flops.h);
//   ms/step split: data (the host building the batch: masking, copies), exposed communication
//   (all-reduce time that backward did not hide, from dist/measure/timeline.h), compute (the rest), and the
//   overlap fraction (hidden / total communication time);
//   memory: current and peak bytes of this rank's device;
//   under --amp the loss scale (1 for bf16), and the steps skipped so far when there are any.
// At start-up, the memory ledger's prediction (dist/measure/memory_ledger.h: parameters, gradients,
// optimizer state, f32 masters for --amp, per rank under --zero); the summary and the --metrics
// JSON ("memory_ledger") add what was measured after the first step and at the peak.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/encoder/options.h"     // defines: EncoderOptions
#include "apps/encoder/validation.h"  // defines: EvalResult
#include "apps/trainer/run/clock.h"       // defines: RunClock
#include "apps/trainer/run/position.h"    // defines: Position
#include "apps/trainer/run/run_log.h"     // defines: Eta

namespace tandem::apps::encoder {

struct Training;

// One progress interval, averaged per step.
struct Interval {
  int64_t steps = 0;
  double wall_ms = 0, data_ms = 0, exposed_ms = 0, overlap = 1;
  double loss = 0;               // global mean of the steps' MLM losses
  double grad_norm = 0;          // before clipping, the interval's last step
  double sequences_per_s = 0;    // global
  double tokens_per_s = 0;       // global
  double mfu = 0;                // per rank, 0 when the peak is unknown
  int64_t skipped_steps = 0;     // steps of this run skipped so far (--amp: non-finite gradients)
  double loss_scale = 0;         // --amp: the loss scale after the interval (1 for bf16); 0: no AMP
  double step_ms() const { return steps ? wall_ms / steps : 0; }
  double compute_ms() const { return steps ? (wall_ms - data_ms) / steps - exposed_ms : 0; }
};

// "step S/T | loss | lr | seq/s tok/s (per rank) | MFU | ms/step split | mem" (rank 0 prints it;
// the loop appends " | elapsed ... eta ...", apps/trainer/run/run_log.h).
std::string progress_line(int64_t step, int64_t total, double lr, const Interval& iv, int world, Device dev);
// "validation step S: masked-token accuracy A (unigram baseline B) | loss L (baseline M)".
std::string validation_line(const EvalResult& r, const Training& t);

// Corpus, model, settings, the LR rule and the predicted memory ledger (rank 0).
void print_start(const EncoderOptions& o, const Training& t);

// The run's records beside its checkpoints (rank 0; apps/trainer/run/run_log.h, cli.h): the effective
// configuration into <checkpoint-dir>/config_<run-id>.toml, and the --log-file (default <checkpoint-
// dir>/log_<run-id>.jsonl) opened with its "start" record. Call once, after set_up.
void start_records(const EncoderOptions& o, Training& t);
// The "step" record of a progress interval that ended at `pos`.
void log_step(Training& t, const trainer::Position& pos, const Interval& iv, const trainer::Eta& eta);
// The "val" record of a validation.
void log_validation(Training& t, const EvalResult& e, int64_t samples, int64_t epoch);

struct RunRecord {
  Interval last;                    // the latest progress interval
  std::vector<EvalResult> evals;    // every validation, in order
  int64_t checkpoints_written = 0;  // RunControl::saves() at the end
};

// After the last step (clock stopped): writes the --trace (all ranks take part), then on rank 0
// prints the done line and writes the --metrics JSON.
void report(const EncoderOptions& o, Training& t, const trainer::RunClock& clock, const RunRecord& rec, int64_t step);

}  // namespace tandem::apps::encoder
