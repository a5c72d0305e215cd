// apps/trainer/run/clock.cpp: RunClock's arithmetic (see clock.h for what each interval means).
#include "apps/trainer/run/clock.h"

#ifdef TANDEM_WITH_CUDA
#include "core/cuda/context.h"  // defines: cuda::synchronize
#endif

namespace tandem::trainer {

void device_sync(Device d) {
#ifdef TANDEM_WITH_CUDA
  if (d.is_cuda()) cuda::synchronize();
#else
  (void)d;
#endif
}

void RunClock::start_steady(int64_t step, Device dev) {
  device_sync(dev);
  steady_start = Clock::now(), steady_from = step, paused_s_at_steady = paused_s;
}

void RunClock::resume(Clock::time_point paused_at) {
  const Clock::time_point now = Clock::now();
  paused_s += std::chrono::duration<double>(now - paused_at).count();
  interval_start += std::chrono::duration_cast<Clock::duration>(now - paused_at);
}

void RunClock::stop(Device dev) {
  device_sync(dev);
  end = Clock::now();
}

double RunClock::train_s() const {
  return init_s < 0 ? 0 : std::chrono::duration<double>(end - first_step).count() - paused_s;
}

double RunClock::steady_images_per_s(int64_t step, int64_t run_steps, int64_t global_batch) const {
  if (steady_from >= 0 && step > steady_from) {
    const double sec = std::chrono::duration<double>(end - steady_start).count() - (paused_s - paused_s_at_steady);
    return (step - steady_from) * global_batch / sec;
  }
  const double train = train_s();
  return train > 0 ? run_steps * global_batch / train : 0;
}

}  // namespace tandem::trainer
