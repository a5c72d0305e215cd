#!/usr/bin/env bash
# tests/test_study_plots.sh: apps/scripts/study/plots.py's timeline on a Chrome trace made here (2 and 4
# ranks, the event names dist/measure/timeline.cpp and the trainers write): the PNG and SVG are written,
# and the legend lies outside the axes, within the figure - inside, it covered rank 0's row. Exits 77
# (ctest: Skipped) when no python3 here has matplotlib.
#   bash tests/test_study_plots.sh [OUT_DIR]
set -euo pipefail
src=${TANDEM_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
py=""  # the Debian package serves /usr/bin/python3, which may not be the first python3 on PATH
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c "import matplotlib" 2>/dev/null; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "test_study_plots: no python3 with matplotlib (apt install python3-matplotlib): skipped"; exit 77
fi
"$py" - "$src/apps/scripts/study" "$out" <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[1])
import plots
out = sys.argv[2]
drawn = []
save = plots.save
plots.save = lambda fig, o, name: drawn.append(fig) or save(fig, o, name)  # keep the figure to measure
for n in (2, 4):
    # Six 10 ms steps per rank, ranks 150 us apart: forward 3 ms, backward 5 ms with 4 buckets ready
    # 1 ms apart (each all-reduced in 0.9 ms, 0.1 ms after), optimizer 1 ms.
    ev = []
    for r in range(n):
        for s in range(6):
            t = 1000 + s * 10000 + r * 150
            ev += [{"name": "forward", "ph": "X", "pid": r, "tid": 0, "ts": t, "dur": 3000},
                   {"name": "backward", "ph": "X", "pid": r, "tid": 0, "ts": t + 3000, "dur": 5000},
                   {"name": "optimizer.step", "ph": "X", "pid": r, "tid": 0, "ts": t + 8900, "dur": 1000}]
            for k in range(4):
                ready = t + 4000 + k * 1000
                ev += [{"name": f"bucket {k} ready", "ph": "X", "pid": r, "tid": 0, "ts": ready, "dur": 0},
                       {"name": f"allreduce bucket {k}", "ph": "X", "pid": r, "tid": 1, "ts": ready + 100, "dur": 900}]
    trace = os.path.join(out, f"trace_{n}.json")
    with open(trace, "w") as f:
        json.dump({"traceEvents": ev}, f)
    made = plots.timeline(trace, f"net{n}", 32, out)
    assert made == {"png": f"timeline_net{n}_b32.png", "svg": f"timeline_net{n}_b32.svg"}, made
    for p in made.values():
        assert os.path.getsize(os.path.join(out, p)) > 1000, f"{p}: (nearly) empty"
    fig = drawn[-1]
    ax = fig.axes[0]
    a, leg = ax.get_window_extent(), ax.get_legend().get_window_extent()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["forward", "backward", "optimizer.step", "launch", "finish", "ready"], labels
    assert leg.x0 >= a.x1 or leg.y1 <= a.y0 or leg.y0 >= a.y1, \
        f"{n} ranks: the legend {leg.bounds} lies over the axes {a.bounds} (it covers data)"
    assert 0 <= leg.x0 and leg.x1 <= fig.bbox.width and 0 <= leg.y0 and leg.y1 <= fig.bbox.height, \
        f"{n} ranks: the legend {leg.bounds} is cut off by the figure {fig.bbox.bounds}"
    print(f"{n} ranks: legend at x {leg.x0:.0f}-{leg.x1:.0f} px, axes end at {a.x1:.0f} px, "
          f"figure {fig.bbox.width:.0f} px wide")
PY
echo "test_study_plots: all checks passed ($out)"
