#!/usr/bin/env bash
# tests/test_plot_run.sh: apps/scripts/plot_run.py on the run-log fixtures (tests/data/run_logs/,
# made by make_run_logs.py): each PNG exists, is a PNG of the expected size and is not blank, the
# extra "loss against samples" panel appears exactly when the runs' global batches differ, one huge
# loss does not flatten the loss panel (it is clipped and marked; a divergence is not), and bad input
# fails with a message. Exits 77 (ctest: Skipped) when no python3 here has matplotlib.
#   bash tests/test_plot_run.sh [OUT_DIR]
set -euo pipefail
src=${TANDEM_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
# The Debian package serves /usr/bin/python3, which may not be the first python3 on PATH (pyenv, venvs).
py=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c "import matplotlib" 2>/dev/null; then py=$p; break; fi
done
if [ -z "$py" ]; then echo "test_plot_run: no python3 with matplotlib (apt install python3-matplotlib): skipped"; exit 77; fi
plot="$py $src/apps/scripts/plot_run.py"
logs=$src/tests/data/run_logs

# check PNG MIN_WIDTH MAX_WIDTH: a real PNG, that size, and drawn on (not one flat colour).
check() {
  "$py" - "$@" <<'PY'
import sys
import matplotlib.image as mpimg
path, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
img = mpimg.imread(path)[..., :3]
h, w = img.shape[:2]
assert lo <= w <= hi, f"{path}: width {w}, expected {lo}-{hi}"
ink = (img.mean(axis=2) < 0.9).mean()  # share of pixels that are not (near) white
assert 0.03 < ink < 0.6, f"{path}: {100 * ink:.1f} % of the pixels drawn - blank or a flood"
colours = len({tuple(p) for p in (img[::4, ::4].reshape(-1, 3) * 255).astype(int).tolist()})
assert colours > 50, f"{path}: only {colours} colours - no curves"
print(f"{path}: {w}x{h}, {100 * ink:.1f} % drawn, {colours} colours")
PY
}

# Three runs whose global batches differ (32, 64, 128 per step): 2 x 3 panels, loss vs samples added.
$plot "$logs"/*.jsonl --out "$out/all.png"
check "$out/all.png" 1900 2200
# One run (resumed mid-way, an unknown key in every record): 2 x 2 panels, on each x axis.
for x in step samples time; do
  $plot "$logs/resnet_tiny_2ranks_b32.jsonl" --x "$x" --out "$out/one_$x.png"
  check "$out/one_$x.png" 1300 1450
done
# The encoder's log: masked-token accuracy, tokens/s, a loss scale, a torn last line.
$plot "$logs/bert_tiny_fp16.jsonl" --out "$out/encoder.png" 2> "$out/encoder.err"
check "$out/encoder.png" 1300 1450
grep -q "skipped 1 line" "$out/encoder.err" || { echo "the torn line was not reported"; exit 1; }

# One huge loss (1e4 at one step, as a bad batch logs it) must not flatten the loss panel: the y range
# follows the curve and the point is drawn on the edge; a sustained rise (a divergence) is data and stays
# on the scale; the fixtures (noisy, a steep start) have nothing clipped.
"$py" - "$logs" "$out" "$src/apps/scripts" <<'PY'
import json, math, os, sys
logs, out, scripts = sys.argv[1:4]
sys.path.insert(0, scripts)
import plot_run
src = os.path.join(logs, "resnet_tiny_1rank_b128.jsonl")
recs = [json.loads(l) for l in open(src) if l.strip()]
steps = [r for r in recs if r.get("event") == "step"]
spike, diverge = steps[len(steps) // 2], steps[-4:]
def write(name, edit):
    path = os.path.join(out, name)
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps(edit(r)) + "\n")
    return path
spiked = write("spike.jsonl", lambda r: dict(r, loss=1.0e4) if r is spike else r)
diverged = write("diverge.jsonl", lambda r: dict(r, loss=40.0 + r["step"] / 100) if r in diverge else r)
curve = [r["loss"] for r in steps if r is not spike]
fig = plot_run.draw([plot_run.Run(spiked)], "auto", 0.6, None)
lo, hi = fig.axes[0].get_ylim()
assert hi < 2 * max(curve) and lo <= min(curve) <= max(curve) <= hi, \
    f"spike: loss panel y range ({lo:.4g}, {hi:.4g}) for a curve in ({min(curve)}, {max(curve)}) and one 1e4"
assert fig.clipped_loss == [(spike["step"], 1.0e4)], f"spike: clipped {fig.clipped_loss}"
marks = [l for l in fig.axes[0].get_lines() if l.get_gid() == "off"]
assert len(marks) == 1 and marks[0].get_ydata()[0] == hi, "spike: no mark on the panel's top edge"
fig = plot_run.draw([plot_run.Run(diverged)], "auto", 0.6, None)
assert fig.axes[0].get_ylim()[1] >= 40 + diverge[-1]["step"] / 100 and not fig.clipped_loss, \
    f"divergence: clipped {fig.clipped_loss}, y range {fig.axes[0].get_ylim()}"
for name in sorted(os.listdir(logs)):
    if name.endswith(".jsonl"):
        fig = plot_run.draw([plot_run.Run(os.path.join(logs, name))], "auto", 0.6, None)
        assert not fig.clipped_loss, f"{name}: clipped {fig.clipped_loss} from a clean log"
print(f"loss outliers: spike clipped, panel ({lo:.3g}, {hi:.3g}); divergence and fixtures unclipped")
PY
$plot "$out/spike.jsonl" --out "$out/spike.png" > "$out/spike.out"
check "$out/spike.png" 1300 1450
grep -q "1 loss value(s) far off" "$out/spike.out" ||
  { cat "$out/spike.out"; echo "the clipped loss was not reported"; exit 1; }

# Bad input: a clear message and a non-zero exit, never a traceback or an empty picture.
if $plot "$out/absent.jsonl" --out "$out/bad.png" 2> "$out/bad.err"; then echo "a missing log was accepted"; exit 1; fi
grep -q "no such file" "$out/bad.err" || { cat "$out/bad.err"; exit 1; }
echo '{"event": "start", "run_id": "x"}' > "$out/empty.jsonl"
if $plot "$out/empty.jsonl" --out "$out/bad.png" 2> "$out/bad.err"; then echo "a log without records was accepted"; exit 1; fi
grep -q "no step or val records" "$out/bad.err" || { cat "$out/bad.err"; exit 1; }
! grep -q Traceback "$out/bad.err"
echo "test_plot_run: all checks passed ($out)"
