#!/usr/bin/env bash
# apps/scripts/compare_strategies.sh: data-parallel strategies side by side, as the DDP and Horovod
# papers compare them. Trains the same model on synthetic data (compute only: no decoding in the
# measured path) with 1 rank, then with N ranks under each gradient-communication strategy, and
# prints one table: images/s (global, per rank), speedup and scaling efficiency against 1 rank,
# ms/step, the all-reduce time per step, how much of it backward hid, and the overlap fraction.
#
#   bash apps/scripts/compare_strategies.sh [--ranks 2] [--model resnet_tiny] [--image-size 64]
#                                           [--batch 32] [--steps 60] [--out DIR]
# Raw metrics JSON and logs stay in --out (default runs/compare-<date>); the table is also written
# there as table.md. Weak scaling: --batch is per rank, so N ranks process N times the images.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TANDEM_BUILD_DIR:-$root/build}
ranks=2 model=resnet_tiny size=64 batch=32 steps=60 out=$root/runs/compare-$(date +%Y%m%d-%H%M%S)
while [ $# -gt 0 ]; do
  case $1 in
    --ranks) ranks=$2; shift 2 ;; --model) model=$2; shift 2 ;; --image-size) size=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;; --steps) steps=$2; shift 2 ;; --out) out=$2; shift 2 ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "compare_strategies: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
command -v python3 >/dev/null || { echo "compare_strategies: needs python3 for the table" >&2; exit 2; }
[ -x "$build/apps/train_imagenet" ] || bash "$root/apps/scripts/setup.sh"
mkdir -p "$out"
export HYDRA_LAUNCHER=${HYDRA_LAUNCHER:-fork}

run() {  # name ranks extra-flags...
  local name=$1 n=$2; shift 2
  echo "== $name ($n rank(s))"
  # One BLAS thread per rank when ranks share the cores, so the comparison is not about threads.
  mpiexec -n "$n" -env OPENBLAS_NUM_THREADS 1 -env OMP_NUM_THREADS 1 "$build/apps/train_imagenet" \
    --synthetic --synthetic-size $((batch * ranks * steps)) --synthetic-val-size 0 --num-classes 10 \
    --model "$model" --image-size "$size" --batch "$batch" --steps "$steps" --log-every "$steps" \
    --no-lr-scaling --metrics "$out/$name.json" "$@" > "$out/$name.log" 2>&1 || { tail -5 "$out/$name.log"; return 1; }
  tail -1 "$out/$name.log"
}

run baseline_1rank 1
run ddp_overlap "$ranks"
run ddp_no_overlap "$ranks" --no-overlap
run ddp_no_bucketing "$ranks" --no-bucketing
run ddp_bf16_wire "$ranks" --compress bf16
run ddp_small_buckets "$ranks" --bucket-mb 0.25 --first-bucket-mb 0.25

python3 - "$out" <<'PY' | tee "$out/table.md"
import json, os, sys
out = sys.argv[1]
names = ["baseline_1rank", "ddp_overlap", "ddp_no_overlap", "ddp_no_bucketing", "ddp_bf16_wire", "ddp_small_buckets"]
runs = {n: json.load(open(os.path.join(out, n + ".json"))) for n in names if os.path.exists(os.path.join(out, n + ".json"))}
base = runs["baseline_1rank"]["images_per_s"]
m = runs["baseline_1rank"]
print(f"model {m['model']}, {m['image_size']} px, batch {m['batch_per_rank']}/rank, {m['steps']} steps, device {m['device']}, backend of the N-rank runs: {runs.get('ddp_overlap', m)['backend']}\n")
print("| strategy | ranks | images/s | per rank | speedup | scaling eff. | ms/step | comm ms/step | exposed ms/step | overlap |")
print("|---|---|---|---|---|---|---|---|---|---|")
for n, r in runs.items():
    ips, w = r["images_per_s"], r["world_size"]
    c = r.get("comm", {})
    ms = 1000.0 * r["global_batch"] / ips
    comm = "-" if w == 1 else f"{c.get('comm_ms_per_step', 0):.1f} | {c.get('exposed_ms_per_step', 0):.1f} | {c.get('overlap', 0):.0%}"
    if w == 1: comm = "- | - | -"  # one rank communicates nothing: no overlap to speak of
    print(f"| {n} | {w} | {ips:.0f} | {ips / w:.0f} | {ips / base:.2f} | {ips / base / w:.0%} | {ms:.1f} | {comm} |")
PY
