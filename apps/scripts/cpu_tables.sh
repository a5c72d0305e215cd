#!/usr/bin/env bash
# apps/scripts/cpu_tables.sh: issue 31's CPU tables in one command - bench_ops' CPU rows (1 thread)
# and the PyTorch peer (apps/scripts/cpu_peer.py: every row, 1 and 2 threads, 5 alternated runs),
# with the machine's load (uptime) before and after each, all raw output kept.
#   bash apps/scripts/cpu_tables.sh OUT_DIR [TAG]
# writes OUT_DIR/bench_ops<TAG>.{txt,json}, OUT_DIR/cpu_peer<TAG>.{txt,json}, OUT_DIR/cpu_peer_logs<TAG>/.
# TAG (default: _<UTC time>) keeps earlier measurements' files. BENCH_ARGS / PEER_ARGS are appended to
# bench_ops' / cpu_peer.py's options (later ones win), e.g. PEER_ARGS="--rows bert_small_128_b8 --threads 1". Needs the CPU build (TANDEM_BUILD_DIR,
# default build-cpu) and Debian's python3-torch (/usr/bin/python3). About an hour on 2 idle cores;
# run it on a quiet machine: other processes' load moves every figure.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: cpu_tables.sh OUT_DIR [TAG]}
tag=${2:-_$(date -u +%Y%m%dT%H%M)}
build=${TANDEM_BUILD_DIR:-$root/build-cpu}
mkdir -p "$out"
{
  uptime
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$build/apps/bench_ops" --cpu --cpu-conv-vgg --json "$out/bench_ops$tag.json" \
    ${BENCH_ARGS:-}
  uptime
} 2>&1 | tee "$out/bench_ops$tag.txt"
{
  uptime
  /usr/bin/python3 "$root/apps/scripts/cpu_peer.py" --build "$build" --out "$out" --repeats 5 --tag "$tag" \
    ${PEER_ARGS:-}
  uptime
} 2>&1 | tee "$out/cpu_peer$tag.txt"
