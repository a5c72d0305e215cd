#!/usr/bin/env bash
# tests/test_plot_run.sh: apps/scripts/plot_run.py on the run-log fixtures (tests/data/run_logs/,
# made by make_run_logs.py): each PNG exists, is a PNG of the expected size and is not blank, the
# extra "loss against samples" panel appears exactly when the runs' global batches differ, and bad
# input fails with a message. Exits 77 (ctest: Skipped) when no python3 here has matplotlib.
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

# Bad input: a clear message and a non-zero exit, never a traceback or an empty picture.
if $plot "$out/absent.jsonl" --out "$out/bad.png" 2> "$out/bad.err"; then echo "a missing log was accepted"; exit 1; fi
grep -q "no such file" "$out/bad.err" || { cat "$out/bad.err"; exit 1; }
echo '{"event": "start", "run_id": "x"}' > "$out/empty.jsonl"
if $plot "$out/empty.jsonl" --out "$out/bad.png" 2> "$out/bad.err"; then echo "a log without records was accepted"; exit 1; fi
grep -q "no step or val records" "$out/bad.err" || { cat "$out/bad.err"; exit 1; }
! grep -q Traceback "$out/bad.err"
echo "test_plot_run: all checks passed ($out)"
