// apps/trainer/run/report_json.h: the pieces of a run's report both trainers print and write alike -
// a byte count in MiB, the progress record's timing and memory entries, the --metrics file's
// communication, memory and interval entries, and writing the file.
//
// Each trainer keeps its own report (apps/train/report.cpp, apps/encoder/report.cpp): what it
// measures differs (images or tokens, top-1 or masked-token accuracy). What is the same is the
// Step's measurements, so one copy here keeps the two files' keys and units alike for
// apps/scripts/ (plot_run.py reads both trainers' logs). JSON objects are sorted by key, so a
// trainer merging these entries into its own object writes the same file as before.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/storage.h"          // defines: MemoryStats
#include "dist/measure/timeline.h"  // defines: TimelineSummary

namespace tandem::trainer {

struct LaunchCounts;  // apps/trainer/step/step.h

// "123 MiB" (rounded to whole MiB): the progress lines' memory.
std::string mib(int64_t bytes);

// A progress interval's times per step (ms): the step, the data wait, compute, exposed
// communication, and the host's part (null where the trainer does not measure it).
struct StepTimes {
  double step_ms, data_ms, compute_ms, exposed_comm_ms;
  nlohmann::json host_ms;
};

// The run log's step record entries for these times, the interval's overlap and the device's
// memory now: {"ms": {...}, "overlap", "mem_mib", "peak_mib"}.
nlohmann::json step_record_times(const StepTimes& t, double overlap, const MemoryStats& m);

// The --metrics entry of which fused GPU paths ran and how often each fell back, over the whole run
// (the ops' own counters, CUDA calls only): {"gpu_paths": {"attention_sdpa": {fused, reference},
// "gemm_bias": {fused, separate}, "gemm_bgradb": ..., "conv_bias": ..., "conv_bias_relu_graph":
// ..., "conv_bn_graph": ..., "batchnorm_cudnn": {bn, bn_relu, bn_add_relu, fallbacks}}}. The GPU
// session's first look tabulates it (session_summary.py).
nlohmann::json gpu_paths_metrics();

// The --metrics entries of the Step's communication and the device's memory:
// {"comm": {comm_ms_per_step, exposed_ms_per_step, overlap, steps}, "memory": {current_bytes, peak_bytes}}.
nlohmann::json comm_and_memory_metrics(const dist::TimelineSummary& comm, const MemoryStats& mem);

// The run log's first record, built from what both trainers' options (`o`) and set-up (`t`) name
// alike: {"event": "start", program, unit (what one sample is), run id, world size, model, start
// step, steps, global batch, device, and a "config" of the shared settings plus the trainer's own
// `config` entries (its schedule's length, its sequence length).
template <class Options, class Training>
nlohmann::json start_record(const Options& o, const Training& t, const std::string& program, const std::string& unit,
                            nlohmann::json config) {
  config.update({{"batch", o.batch}, {"grad_accum_steps", o.step.grad_accum_steps}, {"lr", t.sched.base_lr},
                 {"amp", o.amp}, {"optimizer", o.optimizer}, {"lr_scheduler", o.lr_schedule}, {"zero", o.zero},
                 {"text", o.effective_config}});
  return {{"event", "start"}, {"program", program}, {"run_id", t.folder.run_id()}, {"world_size", t.world->size},
          {"model", o.model}, {"unit", unit}, {"start_step", t.start_at.step}, {"steps", t.total_steps},
          {"global_batch", t.global_batch}, {"device", t.dev.str()}, {"config", config}};
}

// The times of a run's end: steps, this invocation's steps, and its init, train and wall seconds.
struct RunEnd {
  int64_t steps, steps_this_run;
  double init_s, train_s, wall_s;
};

// The last eager step's cast and GEMM launches (apps/trainer/step/step.h LaunchCounts; the AMP goal:
// 0 casts, 0 f32 GEMMs), as --metrics' "launches_per_step".
nlohmann::json launch_counts_json(const LaunchCounts& c);

// The --metrics entries both trainers' options (`o`), set-up (`t`), clock and record say alike:
// the version, model, ranks, device and backend, the batch, the steps and times of `end`, the run
// (resumed from, id), the precision and its last loss scale, the non-finite policy, the memory
// ledger and the checkpoints written. The trainer merges in its own.
template <class Options, class Training, class Clock, class Record>
nlohmann::json shared_metrics(const Options& o, const Training& t, const Clock& clock, const Record& rec,
                              const RunEnd& end, const std::string& backend, const char* version) {
  return {{"tandem_version", version}, {"model", o.model}, {"world_size", t.world->size}, {"device", t.dev.str()},
          {"backend", backend}, {"batch_per_rank", o.batch}, {"global_batch", t.global_batch},
          {"steps", end.steps}, {"steps_this_run", end.steps_this_run}, {"resumed_from", t.resumed_from},
          {"run_id", t.folder.run_id()}, {"init_s", end.init_s}, {"train_s", end.train_s},
          {"paused_s", clock.paused_s}, {"wall_s", end.wall_s}, {"bench_warmup_steps", t.bench_warmup},
          {"memory_ledger", t.memory.json()}, {"amp", o.amp},
          {"loss_scale", t.step->loss_scale()},  // after the last step; 1 for bf16, 0 without AMP
          {"launches_per_step", launch_counts_json(t.step->last_launches())},
          {"on_nonfinite", o.on_nonfinite}, {"checkpoints_written", rec.checkpoints_written}};
}

// Writes `j` (indented) to `file`, creating its folder: the --metrics file.
void write_json_file(const std::string& file, const nlohmann::json& j);

}  // namespace tandem::trainer
