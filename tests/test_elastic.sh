#!/usr/bin/env bash
# tests/test_elastic.sh: apps/scripts/elastic.sh, the restart supervisor, on train_imagenet under
# mpiexec (issue 20, item 3): one rank of 4 is killed (TANDEM_FAULT=3:40:kill, first attempt only)
# and the job finishes on 3; a SIGTERM to the supervisor is passed on and comes back as status 75
# with no restart; --min-ranks and --max-restarts give up when they say; a host file's unreachable
# host is dropped; a job without --checkpoint-dir is refused; the run resumed on 3 ranks ends where
# its schedule ends. ctest runs it as `elastic` (label scripts).
#   bash tests/test_elastic.sh BUILD_DIR [OUT_DIR]
set -u -o pipefail
src=${TANDEM_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
build=${1:?usage: test_elastic.sh BUILD_DIR [OUT_DIR]}
out=${2:-$(mktemp -d)}
if [ -d "$out" ] && [ -n "$(ls -A "$out")" ] && [ ! -e "$out/.test_elastic" ]; then
  echo "test_elastic: '$out' is not empty and not an earlier run's folder: pass a new or empty one" >&2; exit 2
fi
rm -rf "$out" && mkdir -p "$out" && touch "$out/.test_elastic" && cd "$out"
export HYDRA_LAUNCHER=${HYDRA_LAUNCHER:-fork} OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
app=$build/apps/train_imagenet
elastic="timeout -s KILL 300 bash $src/apps/scripts/elastic.sh"
failed=0
check() {
  local what="$1"; shift
  if "$@"; then echo "ok      $what"; else echo "FAILED  $what"; failed=$((failed + 1)); fi
}
has() { grep -q -- "$2" "$1"; }
hasnt() { ! grep -q -- "$2" "$1"; }

# 240 training images: 15 steps per epoch on 4 ranks at batch 4, 20 on 3.
"$build/apps/make_dataset" --out data --classes 3 --train-per-class 80 --val-per-class 4 --min-size 16 \
  --max-size 20 --threads 1 > make_dataset.log 2>&1 || { echo "make_dataset failed"; cat make_dataset.log; exit 1; }
common=(--device cpu --model small_cnn --data data --image-size 16 --batch 4 --workers 1 --lr 0.05 --log-every 10)

echo "--- one rank of 4 killed at step 40 (epoch 3): the job finishes on 3"
$elastic --ranks 4 --min-ranks 2 --max-restarts 2 --log-dir kill/logs --first-env TANDEM_FAULT=3:40:kill -- \
  "$app" "${common[@]}" --epochs 4 --checkpoint-dir kill/ck > kill.txt 2>&1
rc=$?
check "finished (status $rc)" [ "$rc" = 0 ]
check "attempt 1 ended with a rank killed by signal 9" has kill.txt "elastic: attempt 1 on 4 rank(s), .* s: a rank was killed by signal 9"
check "  ... and the summary says whether the out-of-memory killer did it" \
  grep -q "out-of-memory killer\|no out-of-memory kill in" kill.txt
check "attempt 2 ran on 3 ranks, from the last checkpoint" has kill.txt "elastic: attempt 2 on 3 rank(s): mpiexec -n 3 .* --resume auto"
check "  ... which it resumed" has kill.txt "resumed from kill/ck/checkpoint_epoch2.safetensors"
check "done after 2 attempts" has kill.txt "elastic: done after 2 attempt(s)"
check "the fault was for the first attempt only" [ "$(grep -c 'TANDEM_FAULT: killing' kill.txt)" = 1 ]
last=$(grep -E '^epoch [0-9]+ step [0-9]+/[0-9]+ ' kill/logs/attempt2.log | tail -1)
check "the resumed run on 3 ranks ends where its schedule ends: $last" \
  bash -c '[[ "$1" =~ step\ ([0-9]+)/([0-9]+)\ \|.*\|\ lr\ ([^ ]+) ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] &&
           awk -v lr="${BASH_REMATCH[3]}" "BEGIN { exit !(lr < 1e-3) }"' _ "$last"
check "  ... without the warning that its schedule changed" hasnt kill.txt "the LR schedule changes"

echo "--- SIGTERM to the supervisor: passed to every rank, status 75, no restart"
# Signalled as a scheduler does, the supervisor's whole process group (`timeout` forwards its SIGTERM
# to the group): the ranks must still get it once, stop at one step and save.
$elastic --ranks 2 --max-restarts 3 --log-dir term/logs -- env TANDEM_FAULT=1:1:slow:20ms \
  "$app" "${common[@]}" --epochs 20 --checkpoint-dir term/ck > term.txt 2>&1 &
sup=$!
for i in $(seq 600); do grep -q "step 20/" term.txt 2>/dev/null && break; sleep 0.1; done
kill -TERM $sup
wait $sup; rc=$?
check "status 75 (got $rc)" [ "$rc" = 75 ]
# mpiexec signals the ranks one after the other: a step boundary may fall between, and the first
# one is counted alone - the stop is one step on both ranks either way.
check "every rank got the signal" [ "$(grep -c 'train_imagenet: SIGTERM received' term.txt)" = 2 ]
check "every rank stopped at one step" has term.txt "^preempted: SIGTERM on [12] of 2 rank(s); stopped after step"
check "not restarted" hasnt term.txt "elastic: attempt 2"
check "said why" has term.txt "came to the supervisor itself, passing the preemption on"

echo "--- --min-ranks and --max-restarts give up when they say"
$elastic --ranks 2 --min-ranks 2 --log-dir min/logs --first-env TANDEM_FAULT=1:5:kill -- \
  "$app" "${common[@]}" --epochs 1 --checkpoint-dir min/ck > min.txt 2>&1
rc=$?
check "--min-ranks 2 after a death on 2 ranks: gives up, not zero (got $rc)" [ "$rc" != 0 ]
check "  ... saying so" has min.txt "giving up: 1 rank(s) left, fewer than --min-ranks 2"
$elastic --ranks 2 --max-restarts 0 --log-dir max/logs --first-env TANDEM_FAULT=1:5:kill -- \
  "$app" "${common[@]}" --epochs 1 --checkpoint-dir max/ck > max.txt 2>&1
rc=$?
check "--max-restarts 0: gives up after the first attempt (got $rc)" [ "$rc" != 0 ]
check "  ... saying so" has max.txt "giving up: 0 restart(s) used"

echo "--- a host file: a host that does not answer is dropped"
printf 'localhost:2\nno-such-host.invalid:2\n' > hosts
$elastic --hostfile hosts --max-restarts 0 --log-dir hostfile/logs -- "$app" "${common[@]}" --epochs 1 \
  --checkpoint-dir hostfile/ck > hosts.txt 2>&1
rc=$?
check "finished on the host that answers (got $rc)" [ "$rc" = 0 ]
check "  ... dropping the other" has hosts.txt "dropping host(s) that do not answer ssh: no-such-host.invalid"
check "  ... with its 2 slots" has hosts.txt "elastic: attempt 1 on 2 rank(s)"

echo "--- refusals"
$elastic --ranks 2 -- "$app" "${common[@]}" --epochs 1 > refused.txt 2>&1
rc=$?
check "no --checkpoint-dir: refused with status 2 (got $rc)" [ "$rc" = 2 ]
check "  ... saying why" has refused.txt "has no --checkpoint-dir"
$elastic --ranks x -- "$app" --checkpoint-dir ck > refused2.txt 2>&1
check "a bad --ranks: refused" has refused2.txt "--ranks must be a positive integer"

if [ "$failed" -gt 0 ]; then
  for f in *.txt; do echo "===== $f (progress lines left out)"; grep -v '^epoch [0-9]* step' "$f"; done
  echo "test_elastic: $failed check(s) failed (logs in $out)"
  exit 1
fi
echo "test_elastic: all checks passed"
