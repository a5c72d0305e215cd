// apps/trainer/run/timeline_window.cpp: a progress interval's communication figures (see timeline_window.h).
#include "apps/trainer/run/timeline_window.h"

namespace tandem::trainer {

CommWindow comm_window(dist::Timeline& tl, size_t from) {
  const auto& steps = tl.steps();
  double comm = 0, exposed = 0;
  size_t n = 0;
  for (size_t i = from; i < steps.size(); ++i, ++n) comm += steps[i].comm_us, exposed += steps[i].exposed_us;
  CommWindow w;
  w.exposed_ms = n ? exposed / n / 1000.0 : 0;
  w.overlap = comm > 0 ? (comm - exposed) / comm : 1;
  return w;
}

CommWindow TimelineWindow::close(dist::Timeline& tl) {
  const CommWindow w = comm_window(tl, from_);
  from_ = tl.steps().size();
  return w;
}

}  // namespace tandem::trainer
