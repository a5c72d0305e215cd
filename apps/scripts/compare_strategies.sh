#!/usr/bin/env bash
# apps/scripts/compare_strategies.sh: data-parallel strategies side by side at one rank count - now
# a preset of the scaling study (apps/scripts/study.sh), kept for its familiar options. Trains the
# same model on synthetic data with 1 rank, then N ranks under each gradient-communication strategy
# (overlap on/off, bucketing off, bf16 on the wire, small buckets), and writes the study's table,
# plots and what-if check to --out (study.md, study.json).
#
#   bash apps/scripts/compare_strategies.sh [--ranks 2] [--model resnet_tiny] [--image-size 64]
#                                           [--batch 32] [--steps 60] [--repeats 1] [--out DIR]
# Weak scaling: --batch is per rank, so N ranks process N times the images.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ranks=2 model=resnet_tiny size=64 batch=32 steps=60 repeats=1 out=$root/runs/compare-$(date +%Y%m%d-%H%M%S)
while [ $# -gt 0 ]; do
  case $1 in
    --ranks) ranks=$2; shift 2 ;; --model) model=$2; shift 2 ;; --image-size) size=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;; --steps) steps=$2; shift 2 ;; --repeats) repeats=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) echo "compare_strategies: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
exec bash "$root/apps/scripts/study.sh" --models "$model" --ranks "1,$ranks" --batches "$batch" --steps "$steps" \
  --image-size "$size" --repeats "$repeats" --strategies ddp,ddp_no_overlap,ddp_no_bucketing,ddp_bf16,ddp_b0.25 \
  --out "$out"
