#!/usr/bin/env bash
# bert_small seq 128 b8, 1 thread: tandem before (main a9a22c8's train_encoder, copied to
# /tmp/cpu3/before) / after (h-cpu3's binary copied to the folder given as $1, default /tmp/cpu3/after:
# the f32 softmax and GELU commit; /tmp/cpu3/after2: with the gradient-norm commit too), alternated;
# each run's last step line, done line, CPU time and faults from /usr/bin/time, uptime before each pair.
after=${1:-/tmp/cpu3/after}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
one() {  # label binary-dir
  /usr/bin/time -f "TIME user %U sys %S wall %e minflt %R maxrss_kb %M" $2/train_encoder --synthetic --device cpu \
    --model bert_small --seq-len 128 --batch 8 --steps 6 --bench-warmup 2 --amp off --val-batches 1 2>&1 |
    grep -E "^step 6/|^done|^TIME" | sed "s|^|$1: |"
}
for rep in 1 2 3 4; do
  echo "== rep $rep $(uptime)"
  if (( rep % 2 )); then one before /tmp/cpu3/before; one after $after
  else one after $after; one before /tmp/cpu3/before; fi
done
echo "== end $(uptime)"
