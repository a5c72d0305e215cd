// apps/trainer/run/clock.h: every time a trainer measures, in one struct (train_imagenet and
// train_encoder alike; the encoder's "images" are sequences).
//
// The run's wall time splits into init (process start -> first batch: MPI, NCCL, data and model
// set-up), training, and paused time (validation and checkpoints, left out of the training rates).
// Steady images/s excludes the first warm-up steps as well (the trainers' --bench-warmup: allocator
// warm-up, cuDNN/cuBLASLt plan search). Host clocks only measure device work after a device_sync, so the clock syncs at
// the two edges that rates are taken over (start of the steady window, end of the run); inside a
// progress interval the host runs ahead and only the interval as a whole is timed.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "core/device.h"  // defines: Device

namespace tandem::trainer {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Waits for the device's queued work, so host clocks measure it (no-op on the CPU).
void device_sync(Device d);

struct RunClock {
  explicit RunClock(Clock::time_point process_start) : process_start(process_start) {}

  Clock::time_point process_start;     // taken before main (static initialisation): init includes MPI
  double init_s = -1;                  // process start -> first batch; -1 until a step has run
  Clock::time_point first_step{};      // training time is measured from here
  Clock::time_point interval_start{};  // start of the current progress interval (moved on by pauses)
  double interval_data_ms = 0;         // time the loader kept the steps of this interval waiting
  double interval_host_ms = 0;         // host time spent issuing this interval's steps (forward,
                                       // backward, optimizer), without the waits for the device: on
                                       // a GPU the launch overhead that CUDA graphs remove; on the
                                       // CPU, where ops run as they are issued, the compute itself.
                                       // When the GPU is the bottleneck, launches also wait for room
                                       // in CUDA's launch queue and this nears the GPU's step time:
                                       // it is the launch overhead when the host is the bottleneck,
                                       // which is where graphs help
  int64_t interval_graph_steps = 0;    // of this interval's steps, those replayed as a CUDA graph
  double interval_graph_host_ms = 0;   // the part of interval_host_ms spent issuing those replays
  Clock::time_point steady_start{};    // end of the --bench-warmup steps, device synchronised
  int64_t steady_from = -1;            // the step the steady window starts after (-1: not reached)
  double paused_s_at_steady = 0;       // paused_s when the steady window started
  double paused_s = 0;                 // validation and checkpoints so far
  Clock::time_point end{};             // after the last step, device synchronised

  // Called before every step: the first one ends init and starts training and the first interval.
  void step_started() {
    if (init_s < 0) init_s = seconds_since(process_start), first_step = interval_start = Clock::now();
  }
  // After every step: its host time (StepResult::host_ms), and whether it was a graph's replay.
  void step_issued(double host_ms, bool replayed) {
    interval_host_ms += host_ms;
    if (replayed) interval_graph_steps += 1, interval_graph_host_ms += host_ms;
  }
  // After `step` steps: the warm-up is over, the steady window starts now.
  void start_steady(int64_t step, Device dev);
  double interval_ms() const { return seconds_since(interval_start) * 1000; }
  void start_interval() {
    interval_data_ms = 0, interval_host_ms = 0, interval_graph_steps = 0, interval_graph_host_ms = 0, interval_start = Clock::now();
  }

  // Brackets validation and checkpoints: their time counts as paused, not as training, and the
  // interval running across them is shifted so its rate does not include them either.
  Clock::time_point pause() const { return Clock::now(); }
  void resume(Clock::time_point paused_at);
  // pause() now, resume() at the end of the scope (however it is left: a preemption's return too).
  class Paused {
   public:
    explicit Paused(RunClock& c) : clock_(c), at_(c.pause()) {}
    ~Paused() { clock_.resume(at_); }
    Paused(const Paused&) = delete;
    Paused& operator=(const Paused&) = delete;

   private:
    RunClock& clock_;
    Clock::time_point at_;
  };

  void stop(Device dev);                 // the run's last step is done (syncs the device)
  double init_or_zero_s() const { return init_s < 0 ? 0.0 : init_s; }
  double train_s() const;                // first step -> stop, minus paused time
  double wall_s() const { return seconds_since(process_start); }
  // Global images/s over the steady window; over the whole run when the window never started
  // (runs shorter than the warm-up). `run_steps` steps were taken in this invocation.
  double steady_images_per_s(int64_t step, int64_t run_steps, int64_t global_batch) const;
};

}  // namespace tandem::trainer
