#!/usr/bin/env bash
# apps/scripts/study.sh: the scaling study - models x strategies x rank counts x batch sizes, each
# cell run R times under mpiexec, written to one folder as study.md, study.json and plots (PNG+SVG).
#
#   bash apps/scripts/study.sh --quick                      # < 10 min on a 2-core CPU machine
#   bash apps/scripts/study.sh [--models resnet_tiny,resnet18,bert_tiny] [--strategies ddp,ddp_no_overlap,
#        ddp_bf16,ddp_no_bucketing,ddp_b0.25,zero1,zero2,zero3,tp2,tp4,ps] [--ranks 1,2,4] [--batches 32] [--repeats 3]
#        [--steps 40] [--image-size 64] [--device cpu|cuda] [--hostfile hosts] [--out DIR]
#   bash apps/scripts/study.sh whatif [apps/whatif options]  # the what-if table for N = 1..1024
#
# Strategies (apps/scripts/study/grid.py): ddp (overlap on), ddp_no_overlap, ddp_no_bucketing,
# ddp_bf16 (bf16 on the wire), ddp_b<MB> (bucket size), zero1, zero2, zero3, tp2/tp4 (tensor
# parallelism, encoder models only: bert_* workloads run train_encoder on synthetic tokens), ps. One
# that this build rejects, TP on an image model and TP T at a rank count T does not divide are listed
# as skipped in study.md instead of failing the study.
# Measures per cell: per-rank and total images/s, speedup and efficiency against 1 rank (steady and
# wall-time speedups side by side), ms/step split into data wait, compute and exposed
# communication, overlap, init vs train time, peak memory per rank and the memory ledger's
# prediction and measurement per rank; median and min-max over repeats.
# Cells with more ranks than usable cores (oversubscribed), noisy 1-rank baselines (spread > 20 %) and
# efficiencies above 100 % are marked next to the figures and explained in study.md.
# The what-if model (apps/whatif) is checked against the measured cells in the same study.md: step
# time within 15 % and exposed communication within its bound (apps/whatif/model.h, Target).
# Output: --out (default runs/study-<date>). Needs python3 and python3-matplotlib (installed with
# apt-get when missing).
#   sudo bash apps/scripts/study.sh links [--models resnet18,resnet50,bert_small] [--strategies ddp,zero2,zero3,ps]
#        [--rates 100mbit,1gbit,10gbit] [--hosts 2] [--ranks-per-host 1] [--batch 8] [--encoder-batch 4]
#        [--image-size 32] [--seq-len 32] [--steps 5] [--out DIR] [--predict-only [--copy-per-host R]]
# The emulated-link mode (apps/scripts/study/links.py): each cell on H hosts x R ranks made by
# apps/scripts/emulated_cluster.sh (network namespaces: root, or a user namespace; links limited by
# tc, UCX over TCP), the CPU's own rates of moving and copying bytes (a bench on unlimited links) and
# a 1-rank compute-only run right before it, MPI's all-reduce efficiency per rate from 5 launches
# (bimodal from launch to launch), and the what-if's prediction with the same link rate, its host and
# copy terms printed; writes links.md, links.json, links.csv and plots. --predict-only re-predicts a
# finished sweep (--copy-per-host R: for a sweep made before the copy bench). One launch of a cell is
# one sample (a 1-rank step varies by 10-30 % from launch to launch on a shared VM): repeat the sweep
# into several folders and judge the medians with apps/scripts/study/links_repeats.py --out DIR FOLDER...
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TANDEM_BUILD_DIR:-$root/build}
if [ "${1:-}" = "whatif" ]; then
  shift
  [ -x "$build/apps/whatif" ] || bash "$root/apps/scripts/setup.sh"
  exec "$build/apps/whatif" "$@"
fi
case " $* " in *" -h "*|*" --help "*) sed -n '2,/^set -e/p' "$0" | sed '$d'; exit 0 ;; esac
# The plots need matplotlib: the Debian package serves the system python (/usr/bin/python3), which
# may not be the first python3 on PATH (pyenv, venvs).
py=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c "import matplotlib" 2>/dev/null; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "study: installing python3-matplotlib (Debian) for the plots"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends python3-matplotlib >/dev/null
  py=/usr/bin/python3
fi
[ -x "$build/apps/train_imagenet" ] && [ -x "$build/apps/whatif" ] && [ -x "$build/apps/bench_allreduce" ] ||
  bash "$root/apps/scripts/setup.sh"
out=$root/runs/study-$(date +%Y%m%d-%H%M%S)
mode=run
if [ "${1:-}" = "links" ]; then mode=links; shift; out=$root/runs/links-$(date +%Y%m%d-%H%M%S); fi
args=()
while [ $# -gt 0 ]; do
  case $1 in --out) out=$2; shift 2 ;; *) args+=("$1"); shift ;; esac
done
export HYDRA_LAUNCHER=${HYDRA_LAUNCHER:-fork}
exec "$py" "$root/apps/scripts/study/$mode.py" --build "$build" --out "$out" "${args[@]}"
