// apps/train/report.h: what train_imagenet measures and how it prints it.
//
// Progress lines cover the interval since the previous line (averages, not one step), because the
// loop does not synchronise with the GPU inside an interval: the host runs ahead and only a sync at
// the interval's end makes wall time equal GPU time. Split of ms/step:
//   data     = time next() blocked waiting for the loader (host-measured, exact);
//   exposed  = communication that backward did not hide (dist/timeline.h, from events);
//   compute  = the rest (forward, backward, optimizer, launch overheads).
// Validation reduces *counts* (not per-rank accuracies) across ranks, so uneven shards still give
// the exact global accuracy. Counts travel as f32, exact below 2^24 = 16.7 M samples.
#pragma once
#include <chrono>
#include <cstdio>
#include <string>

#include "core/autograd.h"
#include "core/ops/loss.h"
#include "core/storage.h"
#include "data/loader.h"
#include "dist/bootstrap.h"
#include "dist/timeline.h"
#include "layers/module.h"
#ifdef TANDEM_WITH_CUDA
#include "core/cuda/context.h"
#endif

namespace tandem::apps {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Waits for the device's queued work, so host clocks measure it (no-op on the CPU).
inline void device_sync(Device d) {
#ifdef TANDEM_WITH_CUDA
  if (d.is_cuda()) cuda::synchronize();
#else
  (void)d;
#endif
}

inline std::string mib(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f MiB", bytes / 1048576.0);
  return b;
}

// One progress interval, averaged per step.
struct Interval {
  int64_t steps = 0;
  double wall_ms = 0, data_ms = 0, exposed_ms = 0, overlap = 1;
  double loss = 0, top1 = 0;  // global means over the interval's samples (top1: last batch only)
  double images_per_s = 0;    // global
  double step_ms() const { return steps ? wall_ms / steps : 0; }
  double compute_ms() const { return steps ? (wall_ms - data_ms) / steps - exposed_ms : 0; }
};

// Mean exposed communication and overall overlap of timeline steps [from, end).
inline void timeline_interval(dist::Timeline& tl, size_t from, Interval& iv) {
  const auto& steps = tl.steps();
  double comm = 0, exposed = 0;
  size_t n = 0;
  for (size_t i = from; i < steps.size(); ++i, ++n) comm += steps[i].comm_us, exposed += steps[i].exposed_us;
  iv.exposed_ms = n ? exposed / n / 1000.0 : 0;
  iv.overlap = comm > 0 ? (comm - exposed) / comm : 1;
}

inline std::string progress_line(int64_t epoch, int64_t step, int64_t total, double lr, const Interval& iv,
                                 int world, Device dev) {
  MemoryStats m = memory_stats(dev);
  char b[512];
  std::snprintf(b, sizeof b,
                "epoch %lld step %lld/%lld | loss %.4f top1 %.1f%% | lr %.4g | %.0f img/s (%.0f/rank) | "
                "%.1f ms/step: data %.1f compute %.1f exposed-comm %.1f (overlap %.0f%%) | mem %s peak %s",
                (long long)epoch, (long long)step, (long long)total, iv.loss, 100 * iv.top1, lr, iv.images_per_s,
                iv.images_per_s / world, iv.step_ms(), iv.data_ms / std::max<int64_t>(iv.steps, 1),
                iv.compute_ms(), iv.exposed_ms, 100 * iv.overlap, mib(m.current_bytes).c_str(),
                mib(m.peak_bytes).c_str());
  return b;
}

struct EvalResult {
  double top1 = 0, top5 = 0, loss = 0;
  int64_t samples = 0;
};

// Runs the whole validation loader on every rank and reduces the counts. Collective.
inline EvalResult evaluate(Module& model, data::Loader& loader, int num_classes) {
  model.eval();
  autograd::NoGradGuard no_grad;
  double c1 = 0, c5 = 0, loss = 0, n = 0;
  loader.start_epoch(0);
  data::Batch b;
  while (loader.next(b)) {
    Tensor logits = model(b.images);
    const int64_t rows = b.labels.numel();
    c1 += ops::topk_correct(logits, b.labels, 1);
    c5 += ops::topk_correct(logits, b.labels, std::min(5, num_classes));
    loss += ops::cross_entropy(logits, b.labels).item() * rows;
    n += rows;
  }
  model.train();
  Tensor sums = Tensor::from_vector({float(c1), float(c5), float(loss), float(n)}, {4});
  dist::comm_for(Device::cpu()).all_reduce(sums, dist::ReduceOp::Sum, "validation counts")->wait();
  std::vector<float> s = sums.to_vector();
  EvalResult r;
  r.samples = static_cast<int64_t>(s[3]);
  if (r.samples > 0) r.top1 = s[0] / s[3], r.top5 = s[1] / s[3], r.loss = s[2] / s[3];
  return r;
}

}  // namespace tandem::apps
