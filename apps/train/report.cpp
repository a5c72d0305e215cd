// apps/train/report.cpp: progress lines, the done line and the --metrics JSON (see report.h).
#include "apps/train/report.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/train/setup.h"       // defines: Training
#include "apps/train/stragglers.h"  // defines: Stragglers, gather_stragglers
#include "apps/trainer/run/report_json.h"  // defines: mib, step_record_times, comm_and_memory_metrics, write_json_file
#include "apps/trainer/run/run_flags.h"  // defines: lr_rule, start_run_records
#include "core/ops/conv/conv.h"       // defines: conv_bias_fusion_stats, conv_bias_relu_stats
#include "core/ops/conv_bn/conv_bn.h" // defines: conv_bn_fusion_stats
#include "core/storage.h"       // defines: memory_stats
#include "core/threads.h"       // defines: configured_cpu_threads, describe
#include "dist/transport/bootstrap.h"     // defines: comm_for (its backend name)
#include "checkpoint/checkpoint.h"  // defines: kTandemVersion

namespace tandem::apps {

using json = nlohmann::json;

namespace {

using trainer::mib;

// The run's totals, shared by the done line and the summary.
struct Totals {
  int64_t steps_this_run = 0;
  double init_s = 0, train_s = 0, wall_s = 0;
  double steady_ips = 0;     // global images/s over the steady window
  double whole_run_ips = 0;  // global images/s over all of this run's training time
  dist::TimelineSummary comm;
  json buckets = json::array();  // per bucket: medians over the steady steps (bucket_medians)
  double backward_end_ms = 0;    // median over the same steps
  MemoryStats mem;
  int64_t skipped_train = 0, skipped_val = 0;  // unreadable files, summed over ranks
  Stragglers stragglers;
};

// Unreadable files met by every rank's loaders. A rank counts the files of its own shard; a file
// that shard padding hands to two ranks counts twice (rare: padding repeats at most world-1 files).
void sum_skipped_files(const Training& t, Totals& x) {
  Tensor n = Tensor::from_vector({float(t.train->skipped_files()), float(t.val ? t.val->skipped_files() : 0)}, {2});
  dist::comm_for(Device::cpu()).all_reduce(n, dist::ReduceOp::Sum, "skipped files")->wait();
  const std::vector<float> v = n.to_vector();
  x.skipped_train = static_cast<int64_t>(v[0]), x.skipped_val = static_cast<int64_t>(v[1]);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// For the study tools (apps/scripts/study, apps/whatif): each bucket's bytes and its ready, launch
// and finish times in ms from the step's start, and when backward ended - medians over the steps
// after the first (which pays one-time setup costs, as TimelineSummary leaves it out too).
void bucket_medians(dist::Timeline& tl, Totals& x) {
  const auto& steps = tl.steps();
  const size_t skip = steps.size() > 1 ? 1 : 0;
  if (steps.size() <= skip) return;
  const size_t nb = steps.back().buckets.size();
  std::vector<double> bwd;
  for (size_t i = skip; i < steps.size(); ++i) bwd.push_back(steps[i].backward_end_us / 1e3);
  x.backward_end_ms = median(bwd);
  for (size_t b = 0; b < nb; ++b) {
    std::vector<double> ready, launch, finish;
    for (size_t i = skip; i < steps.size(); ++i) {
      if (steps[i].buckets.size() != nb) continue;  // a step with another bucket layout: not comparable
      const dist::BucketTiming& t = steps[i].buckets[b];
      ready.push_back(t.ready_us / 1e3), launch.push_back(t.launch_us / 1e3), finish.push_back(t.finish_us / 1e3);
    }
    x.buckets.push_back({{"bytes", steps.back().buckets[b].bytes}, {"ready_ms", median(ready)},
                         {"launch_ms", median(launch)}, {"finish_ms", median(finish)}});
  }
}

// --cuda-graph: when the step was captured and how big the graph is (null without --cuda-graph).
json graph_json(const Training& t) {
  const trainer::GraphCapture* g = t.step->graph();
  if (!g) return nullptr;
  return {{"warmup_steps", g->warmup()}, {"captured_step", g->captured_at()}, {"nodes", g->nodes()},
          {"capture_ms", g->capture_ms()}};
}

json history_json(const std::vector<EpochRecord>& history) {
  json a = json::array();
  for (const EpochRecord& e : history) {
    json h{{"epoch", e.epoch + 1}, {"step", e.step}, {"lr", e.lr}, {"train_loss", e.train_loss},
           {"train_top1", e.train_top1}};
    if (e.val && e.val->failed()) h["val_nonfinite_logits"] = e.val->nonfinite;  // no accuracy: it failed
    else if (e.val) h["val_top1"] = e.val->top1, h["val_top5"] = e.val->top5, h["val_loss"] = e.val->loss;
    a.push_back(h);
  }
  return a;
}

json summary_json(const TrainOptions& o, const Training& t, const trainer::RunClock& clock, const RunRecord& rec,
                  int64_t step, const Totals& x) {
  const int world = t.world->size;
  const Interval& last = rec.last;
  const EvalResult& ev = rec.last_eval;
  const ops::ConvBiasFusionStats fusion = ops::conv_bias_fusion_stats();
  const ops::GraphFusionStats relu_graph = ops::conv_bias_relu_stats(), conv_bn = ops::conv_bn_fusion_stats();
  return json{
      {"app", "train_imagenet"},
      {"parameters", t.model->num_parameters()},
      {"data", o.synthetic ? "synthetic" : o.data},
      {"image_size", o.image_size},
      {"base_lr", t.sched.base_lr},
      {"steps_per_epoch", t.steps_per_epoch},
      {"epochs", t.epochs},
      {"images_per_s", x.steady_ips},
      {"images_per_s_per_rank", x.steady_ips / world},
      {"images_per_s_whole_run", x.whole_run_ips},
      {"last_interval_ms_per_step",
       {{"total", last.step_ms()}, {"data", last.data_ms / std::max<int64_t>(last.steps, 1)},
        {"compute", last.compute_ms()}, {"exposed_comm", last.exposed_ms}, {"host", last.host_step_ms()}}},
      {"ddp", {{"bucket_mb", o.step.bucket_mb}, {"first_bucket_mb", o.step.first_bucket_mb}, {"overlap", !o.no_overlap},
               {"bucketing", !o.no_bucketing}, {"compress", o.step.compress}}},
      {"optimizer", {{"name", o.optimizer}, {"zero", o.zero}, {"clip_grad_norm", o.step.clip_grad_norm}}},
      // A validation that met non-finite logits has no accuracy: null, with the count beside it.
      {"final", {{"train_loss", last.loss}, {"train_top1", last.top1},
                 {"val_top1", ev.failed() ? json(nullptr) : json(ev.top1)},
                 {"val_top5", ev.failed() ? json(nullptr) : json(ev.top5)},
                 {"val_loss", ev.failed() ? json(nullptr) : json(ev.loss)}, {"val_images", ev.samples},
                 {"val_nonfinite_logits", ev.nonfinite}}},
      {"skipped_files", x.skipped_train + x.skipped_val},
      {"skipped_files_train", x.skipped_train},
      {"skipped_files_val", x.skipped_val},
      {"skipped_steps", rec.skipped_steps},
      {"bad_labels", rec.bad_labels},
      {"bn_impl", t.dev.is_cuda() ? o.bn_impl : "cpu"},  // --bn-impl (the CPU has one BatchNorm)
      // --conv-bias-fusion, and how many biased GPU convs ran fused or fell back (core/ops/conv/conv.h)
      // (VGG/AlexNet's conv -> ReLU pairs run conv2d_bias_relu: its one-graph calls and fallbacks)
      {"conv_bias_fusion", {{"setting", t.dev.is_cuda() ? o.conv_bias_fusion : "cpu"},
                            {"fused_calls", fusion.fused},
                            {"unfused_calls", fusion.unfused},
                            {"relu_graph_calls", relu_graph.fused},
                            {"relu_graph_fallbacks", relu_graph.unfused}}},
      // --conv-bn-fusion: ResNet's conv -> BN -> ReLU graph calls and fallbacks (core/ops/conv_bn/conv_bn.h)
      {"conv_bn_fusion", {{"setting", t.dev.is_cuda() ? o.conv_bn_fusion : "cpu"},
                          {"graph_calls", conv_bn.fused},
                          {"fallbacks", conv_bn.unfused}}},
      {"cuda_graph", o.step.cuda_graph},
      {"cuda_graph_capture", graph_json(t)},
      {"compute_s_per_rank", x.stragglers.compute_s},
      {"straggler", {{"rank", x.stragglers.slowest}, {"compute_s", x.stragglers.compute_s[x.stragglers.slowest]},
                     {"median_compute_s", x.stragglers.median_s}}},
      {"history", history_json(rec.history)},
      {"num_classes", t.classes},
      {"strategy", o.strategy},
      {"ps_servers", o.strategy == "ps" ? o.step.ps_servers : 0},
      {"backward_end_ms", x.backward_end_ms},
      {"buckets", x.buckets}};
}


}  // namespace

std::string progress_line(int64_t epoch, int64_t step, int64_t total, double lr, const Interval& iv, int world,
                          Device dev) {
  MemoryStats m = memory_stats(dev);
  char b[512];
  std::snprintf(b, sizeof b,
                "epoch %lld step %lld/%lld | loss %.4f top1 %.1f%% | lr %.4g | %.0f img/s (%.0f/rank) | "
                "%.1f ms/step: data %.1f compute %.1f exposed-comm %.1f (overlap %.0f%%) | host %.2f ms/step | "
                "mem %s peak %s",
                (long long)epoch + 1, (long long)step, (long long)total, iv.loss, 100 * iv.top1, lr, iv.images_per_s,
                iv.images_per_s / world, iv.step_ms(), iv.data_ms / std::max<int64_t>(iv.steps, 1),
                iv.compute_ms(), iv.exposed_ms, 100 * iv.overlap, iv.host_step_ms(), mib(m.current_bytes).c_str(),
                mib(m.peak_bytes).c_str());
  std::string line = b;
  if (iv.graph_steps > 0) {
    line += " | cuda graph " + std::to_string(iv.graph_steps) + "/" + std::to_string(iv.steps) + " steps replayed";
    // An interval with both kinds (the warm-up's): host time with and without the graph, side by side.
    if (iv.graph_steps < iv.steps) {
      char h[96];
      std::snprintf(h, sizeof h, " (host %.2f ms/replayed step, %.2f ms/eager step)",
                    iv.graph_host_ms / iv.graph_steps, (iv.host_ms - iv.graph_host_ms) / (iv.steps - iv.graph_steps));
      line += h;
    }
  }
  if (iv.loss_scale > 0) {
    char s[32];
    std::snprintf(s, sizeof s, " | loss scale %g", iv.loss_scale);
    line += s;
  }
  if (iv.skipped_steps > 0) line += " | skipped " + std::to_string(iv.skipped_steps) + " step(s) (non-finite loss)";
  return line;
}

void print_start(const TrainOptions& o, const Training& t) {
  if (t.world->rank != 0) return;
  std::printf("%s on %d rank(s) (%s, %s), %lld params, batch %lld/rank, %lld steps/epoch, %lld steps, lr %.4g\n",
              o.model.c_str(), t.world->size, t.dev.str().c_str(), dist::comm_for(t.dev).backend(),
              (long long)t.model->num_parameters(), (long long)o.batch, (long long)t.steps_per_epoch,
              (long long)t.total_steps, t.sched.base_lr);
  if (t.dev.is_cpu()) std::printf("CPU: %s\n", describe(configured_cpu_threads()).c_str());  // core/threads.h
  // The LR rule in words (options.h), so a run moved to another world size is not a surprise.
  const int world = t.world->size;
  std::printf("%s", trainer::lr_rule(o.lr_scaling, o.lr, world, t.sched.base_lr).c_str());
  if (t.sched.warmup_steps > 0)
    std::printf("; warmup %lld steps from %.4g", (long long)t.sched.warmup_steps,
                t.sched.base_lr * t.sched.warmup_start_factor);
  if (o.step.grad_accum_steps > 1)
    std::printf("; %d micro-batches of %lld per step (global batch %lld)", o.step.grad_accum_steps, (long long)o.batch,
                (long long)t.global_batch);
  std::printf("\n%s\n", t.memory.ledger().str().c_str());
}

void start_records(const TrainOptions& o, Training& t) {
  t.log = trainer::start_run_records(o, t.folder, t.world->rank == 0);
  if (!t.log.enabled()) return;
  t.log.write(trainer::start_record(o, t, "train_imagenet", "images", {{"epochs", t.epochs}}));
}

void log_step(Training& t, int64_t epoch, const trainer::Position& pos, const Interval& iv, const trainer::Eta& eta) {
  if (!t.log.enabled()) return;
  const MemoryStats m = memory_stats(t.dev);
  const auto opt = [](double v) { return v > 0 ? json(v) : json(nullptr); };
  json r{{"event", "step"}, {"step", pos.step}, {"epoch", epoch + 1}, {"samples", pos.samples}, {"loss", iv.loss},
         {"top1", iv.top1}, {"lr", t.step->lr()}, {"items_per_s", iv.images_per_s}, {"tokens_per_s", nullptr},
         {"loss_scale", opt(iv.loss_scale)}, {"grad_norm", nullptr}, {"skipped_steps", iv.skipped_steps},
         {"elapsed_s", eta.elapsed_s}, {"eta_s", eta.eta_s >= 0 ? json(eta.eta_s) : json(nullptr)}};
  const trainer::StepTimes times{iv.step_ms(), iv.data_ms / std::max<int64_t>(iv.steps, 1), iv.compute_ms(),
                                 iv.exposed_ms, iv.host_step_ms()};
  r.update(trainer::step_record_times(times, iv.overlap, m));
  t.log.write(r);
}

void log_validation(Training& t, const EpochRecord& e, int64_t samples) {
  if (!t.log.enabled() || !e.val) return;
  const EvalResult& v = *e.val;
  const auto val = [&](double x) { return v.failed() ? json(nullptr) : json(x); };
  t.log.write({{"event", "val"}, {"step", e.step}, {"epoch", e.epoch + 1}, {"samples", samples}, {"top1", val(v.top1)},
               {"top5", val(v.top5)}, {"loss", val(v.loss)}, {"images", v.samples}, {"nonfinite_logits", v.nonfinite}});
}

void report(const TrainOptions& o, Training& t, const trainer::RunClock& clock, const RunRecord& rec, int64_t step) {
  Totals x;
  x.steps_this_run = step - t.start.step;
  x.init_s = clock.init_or_zero_s();
  x.train_s = clock.train_s();
  x.steady_ips = clock.steady_images_per_s(step, x.steps_this_run, t.global_batch);
  x.whole_run_ips = x.train_s > 0 ? x.steps_this_run * t.global_batch / x.train_s : 0.0;
  if (!o.trace.empty()) dist::write_trace(o.trace, dist::comm_for(Device::cpu()));
  x.comm = t.step->timeline().summary();
  bucket_medians(t.step->timeline(), x);
  x.mem = memory_stats(t.dev);
  t.memory.measure_peak();
  sum_skipped_files(t, x);
  x.stragglers = gather_stragglers(rec.compute_s);
  x.wall_s = clock.wall_s();
  if (t.world->rank != 0) return;
  std::printf("done: %lld steps, init %.2f s, train %.2f s, steady %.0f img/s (%.0f/rank), wall %.2f s, %s, "
              "skipped files: %lld train, %lld val",
              (long long)x.steps_this_run, x.init_s, x.train_s, x.steady_ips, x.steady_ips / t.world->size, x.wall_s,
              x.comm.str().c_str(), (long long)x.skipped_train, (long long)x.skipped_val);
  if (rec.skipped_steps > 0) std::printf(", skipped steps: %lld (non-finite loss)", (long long)rec.skipped_steps);
  std::printf("\n");
  if (t.world->size > 1) std::printf("stragglers: %s\n", x.stragglers.str().c_str());
  std::printf("%s\n", t.memory.ledger().str().c_str());
  t.log.write({{"event", "end"},
               {"summary", {{"steps", step}, {"steps_this_run", x.steps_this_run}, {"init_s", x.init_s},
                            {"train_s", x.train_s}, {"wall_s", x.wall_s}, {"images_per_s", x.steady_ips},
                            {"val_top1", rec.last_eval.failed() || rec.last_eval.samples == 0 ? json(nullptr)
                                                                                              : json(rec.last_eval.top1)},
                            {"skipped_steps", rec.skipped_steps}}}});
  if (o.metrics.empty()) return;
  json j = summary_json(o, t, clock, rec, step, x);
  j.update(trainer::gpu_paths_metrics());
  j.update(trainer::comm_and_memory_metrics(x.comm, x.mem));
  j.update(trainer::shared_metrics(o, t, clock, rec, {step, x.steps_this_run, x.init_s, x.train_s, x.wall_s},
                                   dist::comm_for(t.dev).backend(), kTandemVersion));
  trainer::write_json_file(o.metrics, j);
}

}  // namespace tandem::apps
