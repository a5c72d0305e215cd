#!/bin/bash
# bert_small seq 128 b8, 1 thread, the CPU peer's tandem command (apps/scripts/cpu_peer.py), main's
# binary (before) and this branch's (after) alternated; steady tok/s from --metrics, CPU time from
# /usr/bin/time. Usage: bert_before_after.sh BEFORE_BIN AFTER_BIN PAIRS OUTDIR
set -u
before=$1 after=$2 pairs=$3 out=$4
mkdir -p "$out"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for i in $(seq 1 "$pairs"); do
  for which in before after; do
    bin=$before; [ "$which" = after ] && bin=$after
    /usr/bin/time -f "user %U sys %S wall %e" -o "$out/${which}_$i.time" "$bin" --synthetic --device cpu \
      --model bert_small --seq-len 128 --batch 8 --steps 6 --bench-warmup 2 --amp off --val-batches 1 \
      --metrics "$out/${which}_$i.json" > "$out/${which}_$i.log" 2>&1
    echo "$which $i $(python3 -c "import json,sys; d=json.load(open('$out/${which}_$i.json')); print(d.get('tokens_per_s') or d['throughput']['tokens_per_s'])") $(cat "$out/${which}_$i.time") load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
