#!/usr/bin/env bash
# perfbn.sh BIN THREADS OUT: perf record (999 Hz) of the resnet18_64_b32 command with 30 steps; writes
# OUT.txt: the run's "done" line, the total samples and the samples of tandem's CPU loops outside
# oneDNN and OpenBLAS (batch norm, the elementwise add/ReLU, SGD, max-pool; the OpenMP regions' outlined
# bodies are named *_omp_fn.*), and OUT.top.txt: perf report's first 40 symbols.
set -euo pipefail
bin=$1; t=$2; out=$3
data=$(mktemp /tmp/perfbn.XXXXXX)
OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t perf record -q -F 999 -o "$data" "$bin" --synthetic --device cpu \
  --model resnet18 --image-size 64 --batch 32 --num-classes 1000 --steps 30 --bench-warmup 2 \
  --synthetic-val-size 0 --lr 0.01 --amp off --metrics "$data.json" 2>&1 | grep '^done' > "$out.txt"
perf report -i "$data" --no-children --sort dso,symbol -n 2>/dev/null | grep -v '^#' | grep -v '^$' > "$data.rep"
head -40 "$data.rep" | cut -c1-160 > "$out.top.txt"
awk '{s += $2} END {print "total samples", s}' "$data.rep" >> "$out.txt"
grep -E "batchnorm|binary_cpu|unary_cpu|sgd_step|max_pool|omp_fn" "$data.rep" | cut -c1-160 >> "$out.txt" || true
# BN: the entry points and batchnorm/cpu.cpp's helpers (inlined into them, or outlined into OpenMP
# regions); the elementwise add and ReLU passes are binary_cpu and unary_cpu.
bn='batchnorm|kernels::\(anonymous namespace\)::(batch_stats|normalize|backward|forward)<|binary_cpu|unary_cpu'
grep -E "$bn" "$data.rep" | awk '{s += $2} END {print "BN + add + ReLU samples:", s + 0}' >> "$out.txt"
grep -E "sgd_step|optim::kernels::\(anonymous namespace\)::update<" "$data.rep" |
  awk '{s += $2} END {print "SGD samples:", s + 0}' >> "$out.txt"
rm -f "$data" "$data.rep" "$data.json"
cat "$out.txt"
