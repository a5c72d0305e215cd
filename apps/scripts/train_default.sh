#!/usr/bin/env bash
# apps/scripts/train_default.sh: the README's main job.
# Sets up and builds, generates the default data set (data_default/, once), then trains a small
# ResNet on it with 2 ranks: mpiexec -n 2 train_imagenet. Runs on the GPU when there is one.
# Extra arguments go to train_imagenet (e.g. --epochs 1). --lr 0.2 is the peak LR of the global batch
# of 64 (2 x 32): --lr is used as given on any number of ranks (before the rule changed, --lr 0.1 was
# multiplied by the 2 ranks: the same 0.2, so the printed numbers are those of earlier logs).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TANDEM_BUILD_DIR:-$root/build}
data=${TANDEM_DATA_DIR:-$root/data_default}
# Only the two programs this job runs: the tests and benchmarks build when they run (test_all.sh).
TANDEM_BUILD_TARGETS="make_dataset train_imagenet" bash "$root/apps/scripts/setup.sh"
"$build/apps/make_dataset" --out "$data"
export HYDRA_LAUNCHER=${HYDRA_LAUNCHER:-fork}
# One BLAS thread per rank: two ranks on two cores would otherwise fight over them.
mpiexec -n 2 -env OPENBLAS_NUM_THREADS 1 -env OMP_NUM_THREADS 1 "$build/apps/train_imagenet" \
  --data "$data" --model resnet_tiny --image-size 64 --batch 32 --epochs 24 --lr 0.2 --crop-scale-min 0.35 \
  --val-every 4 \
  --checkpoint-dir "$root/runs/default" --metrics "$root/runs/default/summary.json" "$@"
