#!/usr/bin/env bash
# apps/scripts/train_encoder_default.sh: the README's encoder job.
# Sets up and builds, installs the `fortunes` package if its texts are missing (the default corpus,
# /usr/share/games/fortunes: ~2.6 MB of English), learns a WordPiece vocab from it once
# (runs/encoder_default/vocab.txt, cached), then trains bert_mini with masked-language modelling on
# 2 ranks: mpiexec -n 2 train_encoder. Validation prints masked-token accuracy and loss on the
# held-out 5 % of the fortunes beside the unigram baseline (always guessing the most frequent token).
# On a 2-core CPU it takes under 10 minutes. Extra arguments go to train_encoder (e.g. --steps 100).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TANDEM_BUILD_DIR:-$root/build}
corpus=${TANDEM_TEXT_DIR:-/usr/share/games/fortunes}
run=${TANDEM_RUN_DIR:-$root/runs/encoder_default}
# Only the two programs this job runs: the tests and benchmarks build when they run (test_all.sh).
TANDEM_BUILD_TARGETS="make_vocab train_encoder" bash "$root/apps/scripts/setup.sh"
if [ ! -d "$corpus" ] && [ "$corpus" = /usr/share/games/fortunes ]; then
  echo "train_encoder_default: installing the fortunes package (the default corpus)"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends fortunes >/dev/null
fi
mkdir -p "$run"
# 8,000 pieces: the corpus has ~60 k distinct words; a small vocab keeps the MLM head cheap.
[ -s "$run/vocab.txt" ] || "$build/apps/make_vocab" "$corpus" --out "$run/vocab.txt" --size 8000
export HYDRA_LAUNCHER=${HYDRA_LAUNCHER:-fork}
# One BLAS thread per rank: two ranks on two cores would otherwise fight over them.
# Recipe: AdamW, lr 1e-3 with 10 % warmup then linear decay (BERT's schedule; a small model takes a
# larger lr than BERT-base's 1e-4), global batch 2 x 16 sequences of 64 tokens.
mpiexec -n 2 -env OPENBLAS_NUM_THREADS 1 -env OMP_NUM_THREADS 1 "$build/apps/train_encoder" \
  --data "$corpus" --vocab "$run/vocab.txt" --model bert_mini --seq-len 64 --batch 16 --steps 800 \
  --optimizer adamw --lr 1e-3 --log-every 50 --val-every 400 \
  --checkpoint-dir "$run" --metrics "$run/summary.json" "$@"
