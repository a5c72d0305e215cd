#!/usr/bin/env bash
# apps/scripts/encoder_memory_table.sh: a model whose DDP AdamW state does not fit a memory budget,
# trained on N CPU ranks with --zero 3 and with --tp N instead (issue 22's demonstration).
#
#   bash apps/scripts/encoder_memory_table.sh [--out DIR] [--model bert_small] [--vocab-size 30522]
#                                             [--ranks 4] [--budget-mib 200] [--steps 3]
# First train_encoder --memory-budget-mib under DDP (--zero 0): refused at start-up, exit 2, with the
# ledger's prediction and what fits. Then the budget with --zero 3 and with --tp N: both train. Then,
# without the budget, DDP, ZeRO-1, ZeRO-2, ZeRO-3 and TP N, each for --steps steps of 2 sequences of 64
# tokens per rank (AdamW, f32, dropout 0): the ledger's prediction per rank (model state + transient
# gradient buffers, apps/trainer/run/memory.h) beside what the allocator measured (model state between
# steps, the steps' peak). Each run's log and --metrics JSON are kept in --out, and memory.md is made
# from them. Needs a CPU build (TANDEM_BUILD_DIR, default build/) and python3.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TANDEM_BUILD_DIR:-$root/build}
out=$root/runs/encoder-memory-$(date +%Y%m%d-%H%M%S) model=bert_small vocab=30522 ranks=4 budget=200 steps=3
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;; --model) model=$2; shift 2 ;; --vocab-size) vocab=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;; --budget-mib) budget=$2; shift 2 ;; --steps) steps=$2; shift 2 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) echo "encoder_memory_table: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
run() {  # tag args... ; prints the exit status
  local tag=$1; shift
  echo "encoder_memory_table: $tag: $*" >&2
  set +e
  HYDRA_LAUNCHER=fork mpiexec -n "$ranks" -env OPENBLAS_NUM_THREADS 1 -env OMP_NUM_THREADS 1 \
    "$build/apps/train_encoder" --synthetic --synthetic-tokens 200000 --device cpu --model "$model" \
    --vocab-size "$vocab" --seq-len 64 --batch 2 --steps "$steps" --log-every 1 --val-batches 1 --dropout 0 \
    --metrics "$out/$tag.json" "$@" > "$out/$tag.log" 2>&1
  local rc=$?
  set -e
  echo "$rc" > "$out/$tag.status"
}
run budget_ddp --memory-budget-mib "$budget" --zero 0
run budget_zero3 --memory-budget-mib "$budget" --zero 3
run "budget_tp$ranks" --memory-budget-mib "$budget" --tp "$ranks"
for s in "zero 0" "zero 1" "zero 2" "zero 3" "tp $ranks"; do
  run "${s// /}" --${s}
done
python3 - "$out" "$model" "$vocab" "$ranks" "$budget" "$steps" <<'EOF'
import json, os, sys
out, model, vocab, ranks, budget, steps = sys.argv[1:]
mib = 1 / 1048576
L = [f"# {model} (vocabulary {vocab}), AdamW in f32, {ranks} CPU ranks: memory per rank", "",
     f"Made by `apps/scripts/encoder_memory_table.sh --model {model} --vocab-size {vocab} --ranks {ranks} "
     f"--budget-mib {budget} --steps {steps}`; each run's log and metrics JSON are beside this file.", "",
     f"## --memory-budget-mib {budget}", ""]
for tag in ["budget_ddp", "budget_zero3", f"budget_tp{ranks}"]:
    rc = open(os.path.join(out, tag + ".status")).read().strip()
    log = open(os.path.join(out, tag + ".log")).read().splitlines()
    said = [l for l in log if "memory ledger predicts" in l]
    done = [l for l in log if l.startswith("done:")]
    L.append(f"- `{tag}`: exit {rc}" + (f": {said[0]}" if said else f": trained ({done[0][:60]}...)" if done else ""))
L += ["", "## Memory per rank (rank 0), predicted by the ledger and measured by the allocator", "",
      "| layout | parameters per rank | predicted model state MiB | measured model state MiB | predicted transient MiB | "
      "predicted state + transient MiB | measured peak MiB (steps) | last loss |", "|---|---|---|---|---|---|---|---|"]
for tag, name in [("zero0", "DDP"), ("zero1", "ZeRO-1"), ("zero2", "ZeRO-2"), ("zero3", "ZeRO-3"), (f"tp{ranks}", f"TP {ranks}")]:
    m = json.load(open(os.path.join(out, tag + ".json")))
    led = m["memory_ledger"]
    p, me = led["predicted_bytes"], led["measured_bytes"]
    psi = p["params"] / 4  # f32
    L.append(f"| {name} | {psi / 1e6:.2f} M | {p['model_state'] * mib:.1f} | {me['model_state'] * mib:.1f} | "
             f"{p['transient'] * mib:.1f} | {(p['model_state'] + p['transient']) * mib:.1f} | "
             f"{me['peak'] * mib:.1f} | {m['final']['train_loss']:.4f} |")
L += ["", "Parameters per rank: the parameter elements a rank holds between steps, as the ledger predicts them "
      "(ZeRO-3: its 1/N shard; TP: its shards of the split layers and the replicated rest). The measured peak is "
      "the steps' (activations, data and transients on top of the model state; ZeRO-3's also holds the units "
      "gathered during a step - the ledger's `gathered` term, not part of the budget). With dropout 0 every "
      "layout trains the same function; TP's loss equals DDP's only up to the data split (TP N x DP 1 reads one "
      "batch of 2 sequences per step, DDP N batches)."]
open(os.path.join(out, "memory.md"), "w").write("\n".join(L) + "\n")
print("\n".join(L))
EOF
