#!/usr/bin/env bash
# apps/scripts/zero_tables.sh: the ZeRO tables of apps/results - memory per rank (predicted by the
# ledger, dist/measure/memory_ledger.h, vs measured by the allocator) and throughput, DDP vs ZeRO-1 vs ZeRO-2.
#
#   bash apps/scripts/zero_tables.sh [--out DIR] [--mem-model vgg16] [--mem-ranks 1,2,4]
#                                    [--tp-model resnet_tiny] [--tp-ranks 2,4] [--tp-steps 30] [--amp bf16]
# Memory: --mem-model with AdamW on 32x32 synthetic images, 2 steps, batch 2 per rank (the model
# state dominates; VGG-16 needs 2.2 GB per rank under DDP). Throughput: --tp-model, AdamW, 64x64
# images, batch 16 per rank, steady images/s. Each run's --metrics JSON and log are kept in --out;
# memory.md and throughput.md are made from them (CPU: build with the default configuration).
# --amp bf16|fp16 runs every case in mixed precision (16-bit parameters and gradients, f32 masters:
# the ZeRO paper's K = 12 accounting); --tp-ranks '' skips the throughput table.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TANDEM_BUILD_DIR:-$root/build}
out=$root/runs/zero-$(date +%Y%m%d-%H%M%S) mem_model=vgg16 mem_ranks=1,2,4 tp_model=resnet_tiny tp_ranks=2,4 tp_steps=30 amp=off
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;; --mem-model) mem_model=$2; shift 2 ;; --mem-ranks) mem_ranks=$2; shift 2 ;;
    --tp-model) tp_model=$2; shift 2 ;; --tp-ranks) tp_ranks=$2; shift 2 ;; --tp-steps) tp_steps=$2; shift 2 ;; --amp) amp=$2; shift 2 ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "zero_tables: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
run() {  # ranks zero tag args...
  local n=$1 z=$2 tag=$3; shift 3
  echo "zero_tables: $tag (N=$n, --zero $z)"
  HYDRA_LAUNCHER=fork mpiexec -n "$n" "$build/apps/train_imagenet" --synthetic --device cpu --optimizer adamw \
    --lr 0.0001 --synthetic-val-size 0 --workers 1 --zero "$z" --amp "$amp" --metrics "$out/$tag.json" "$@" > "$out/$tag.log" 2>&1
}
for n in ${mem_ranks//,/ }; do
  for z in 0 1 2; do
    run "$n" "$z" "mem_${mem_model}_n${n}_z${z}" --model "$mem_model" --image-size 32 --batch 2 --steps 2 \
      --synthetic-size $((2 * n * 4)) --log-every 1
  done
done
for n in ${tp_ranks//,/ }; do
  for z in 0 1 2; do
    run "$n" "$z" "tp_${tp_model}_n${n}_z${z}" --model "$tp_model" --image-size 64 --batch 16 --steps "$tp_steps" \
      --synthetic-size 100000 --num-classes 100 --log-every "$tp_steps"
  done
done
python3 - "$out" "$amp" <<'PY'
import json, glob, os, sys
out, amp = sys.argv[1], sys.argv[2]
mib = lambda b: b / 2**20
def load(pattern):
    rows = []
    for f in sorted(glob.glob(os.path.join(out, pattern))):
        rows.append((os.path.basename(f)[:-5], json.load(open(f))))
    return rows
lines = ["# ZeRO memory per rank: the ledger's prediction vs the allocator", "",
         "Model state = parameters + gradients + optimizer state (AdamW, " + ("f32" if amp == "off" else f"--amp {amp}: 16-bit parameters and gradients, f32 masters, master gradients and moments") + "), measured as the allocator's bytes",
         "after the first step minus what was held before (data, loaders). Peak is the allocator's high-water mark",
         "during the steps (set-up excluded): the model state plus activations, workspace and the transient",
         "gradients, which the ledger predicts (dist/measure/memory_ledger.h). MiB per rank.", "",
         "| model | N | stage | formula | predicted state | measured state | diff | predicted state + transient | "
         "measured peak | vs DDP (state) | vs DDP (peak) |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
ddp = {}
for tag, m in load("mem_*.json"):
    led = m["memory_ledger"]; n = m["world_size"]; z = m["optimizer"]["zero"]
    p = led["predicted_bytes"]["model_state"]; s = led["measured_bytes"]["model_state"]
    t = led["predicted_bytes"]["transient"]; peak = led["measured_bytes"]["peak"]
    if z == 0: ddp[n] = (s, peak)
    ratio = f"{s / ddp[n][0]:.2f} | {peak / ddp[n][1]:.2f}" if n in ddp else " | "
    lines.append(f"| {m['model']} ({m['parameters']/1e6:.1f} M) | {n} | {z} | {led['formula']} | {mib(p):.1f} | "
                 f"{mib(s):.1f} | {100*(s/p-1):+.1f} % | {mib(p + t):.1f} | {mib(peak):.1f} | {ratio} |")
open(os.path.join(out, "memory.md"), "w").write("\n".join(lines) + "\n")
lines = ["# ZeRO throughput on the CPU: DDP vs ZeRO-1 vs ZeRO-2", "",
         "Steady images/s (global), AdamW, synthetic 64x64, batch 16 per rank, MPI over shared memory.", "",
         "| model | N | stage | images/s | images/s per rank | comm ms/step | exposed ms/step |", "|---|---|---|---|---|---|---|"]
for tag, m in load("tp_*.json"):
    c = m["comm"]
    lines.append(f"| {m['model']} | {m['world_size']} | {m['optimizer']['zero']} | {m['images_per_s']:.0f} | "
                 f"{m['images_per_s_per_rank']:.0f} | {c['comm_ms_per_step']:.1f} | {c['exposed_ms_per_step']:.1f} |")
open(os.path.join(out, "throughput.md"), "w").write("\n".join(lines) + "\n")
print(open(os.path.join(out, "memory.md")).read()); print(open(os.path.join(out, "throughput.md")).read())
PY
