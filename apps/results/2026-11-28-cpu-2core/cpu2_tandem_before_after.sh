#!/usr/bin/env bash
# tandem before (main b448b87) / after (h-cpu2) alternated, 1 thread, each run's steady throughput,
# CPU time (user, sys) and minor page faults from /usr/bin/time, uptime before each pair.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
one() {  # label binary-dir row
  local b=$2
  case $3 in
    vgg16) args=($b/train_imagenet --synthetic --device cpu --model vgg16 --image-size 64 --batch 16 --num-classes 1000 --steps 6 --bench-warmup 2 --synthetic-val-size 0 --lr 0.01 --amp off);;
    resnet18) args=($b/train_imagenet --synthetic --device cpu --model resnet18 --image-size 64 --batch 32 --num-classes 1000 --steps 8 --bench-warmup 2 --synthetic-val-size 0 --lr 0.01 --amp off);;
    bert_small) args=($b/train_encoder --synthetic --device cpu --model bert_small --seq-len 128 --batch 8 --steps 6 --bench-warmup 2 --amp off --val-batches 1);;
  esac
  /usr/bin/time -f "TIME user %U sys %S wall %e minflt %R maxrss_kb %M" "${args[@]}" 2>&1 | grep -E "^done|^TIME" | sed "s|^|$1 $3: |"
}
for rep in 1 2 3 4; do
  for row in vgg16 bert_small resnet18; do
    echo "== rep $rep $row $(uptime)"
    if (( rep % 2 )); then one before /tmp/cpu2_old $row; one after /tmp/cpu2_new $row
    else one after /tmp/cpu2_new $row; one before /tmp/cpu2_old $row; fi
  done
done
echo "== end $(uptime)"
