#!/usr/bin/env bash
# ab.sh BEFORE AFTER OUT PAIRS THREADS...: cpu_peer.py's resnet18_64_b32 tandem command (train_imagenet
# --synthetic, resnet18, 64 px, batch 32, 8 steps, 2 warm-up) with two builds of train_imagenet,
# alternated (before, after, before, ...), PAIRS pairs per thread count, OMP_NUM_THREADS =
# OPENBLAS_NUM_THREADS = threads as cpu_peer.py sets them. Each run's log (with /usr/bin/time's user,
# sys, wall) and JSON go to OUT; one summary line per run on stdout; medians at the end.
set -euo pipefail
before=$1; after=$2; out=$3; pairs=$4; shift 4
mkdir -p "$out"
for t in "$@"; do
  for i in $(seq 1 "$pairs"); do
    for v in before after; do
      bin=$before; [ "$v" = after ] && bin=$after
      log=$out/${v}_t${t}_$i.log; js=$out/${v}_t${t}_$i.json
      OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t /usr/bin/time -f "time user %U sys %S wall %e" "$bin" --synthetic \
        --device cpu --model resnet18 --image-size 64 --batch 32 --num-classes 1000 --steps 8 --bench-warmup 2 \
        --synthetic-val-size 0 --lr 0.01 --amp off --metrics "$js" > "$log" 2>&1
      echo "$v t$t #$i $(python3 -c "import json;print(round(json.load(open('$js'))['images_per_s'],1))") img/s" \
           "$(grep '^time' "$log") load $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
python3 - "$out" "$@" <<'PY'
import json, re, statistics, sys, glob, os
out = sys.argv[1]
for t in sys.argv[2:]:
    row = {}
    for v in ("before", "after"):
        ips, cpu = [], []
        for js in sorted(glob.glob(f"{out}/{v}_t{t}_*.json")):
            ips.append(json.load(open(js))["images_per_s"])
            m = re.search(r"time user ([\d.]+) sys ([\d.]+)", open(js[:-5] + ".log").read())
            cpu.append(float(m.group(1)) + float(m.group(2)))
        row[v] = (statistics.median(ips), statistics.median(cpu), len(ips))
    b, a = row["before"], row["after"]
    print(f"threads {t}: median img/s {b[0]:.1f} -> {a[0]:.1f} ({a[0]/b[0]:.3f}x), "
          f"median user+sys {b[1]:.2f} -> {a[1]:.2f} s ({a[1]/b[1]:.3f}x), {b[2]} pairs")
PY
