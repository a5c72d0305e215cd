#!/usr/bin/env bash
# apps/scripts/fault_drill.sh: the failures a cluster job meets, played on train_imagenet under
# `mpiexec -n 2` on a small image folder, each checked for "nothing is lost" (issue 20, item 8):
#   1. SIGTERM during a save   the scheduler's signal (to apps/scripts/elastic.sh, which passes it on)
#                              lands while rank 0 writes a checkpoint to a slow disk: the write
#                              completes, every rank stops at one step with a checkpoint, the exit
#                              status is 75, and the resumed run reaches the end
#   2. SIGKILL of one rank     the job ends; every checkpoint loads; --resume auto reaches the end;
#                              killed while writing (rank 0, slow disk), its temporary is removed by
#                              the next start
#   3. a slow disk             rank 0 writes at 25 KB/s against a 4 s collective timeout: the job
#                              finishes (the watchdog waits while the write advances)
#   4. two jobs on one folder  the second is refused, naming the first (its pid)
#   5. another world size      a 2-rank run preempted inside an epoch resumes on 1 rank and ends
#                              where the schedule ends (last step, LR near 0); run_status.py reads
#                              the preemption (75) from the folder
#   6. another run's folder    resuming run Y's file into run X's folder is refused (status 2, X's
#                              files untouched); with --overwrite-checkpoints Y continues there under
#                              names of its own, and X's files are still untouched (issue 29)
#   7. kill -9, restart        ten times: rank 0 killed, the job restarted at once (rank 0 may still
#                              be a zombie) - never refused; then it reaches the end; run_status.py
#                              says completed
#   8. a corrupted checkpoint  100 floats of the newest file set to 1e30: --evaluate fails with 65
#                              naming the tensor; --resume auto falls back to the newest intact file
#   9. a truncated checkpoint  half the newest file: --resume auto falls back, naming the truncation
# After each: every checkpoint_*.safetensors in the folder loads (train_imagenet --evaluate) and no
# temporary of a finished write is left.
# About two minutes on 2 cores. ctest runs it as `fault_drill` (label scripts).
#   bash apps/scripts/fault_drill.sh [--build DIR] [--out DIR]
# Exit status: 0 all drills passed, 1 a check failed, 2 bad usage.
set -u -o pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TANDEM_BUILD_DIR:-$root/build}
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fault_drill: unknown option '$1' (--build DIR, --out DIR)" >&2; exit 2 ;;
  esac
done
app=$build/apps/train_imagenet
[ -x "$app" ] || { echo "fault_drill: no $app: build first (or pass --build DIR)" >&2; exit 2; }
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/fault_drill.XXXXXX")
# A folder of an earlier drill (it has the marker) is emptied; any other non-empty one is refused.
if [ -d "$out" ] && [ -n "$(ls -A "$out")" ] && [ ! -e "$out/.fault_drill" ]; then
  echo "fault_drill: --out '$out' is not empty and not an earlier drill's folder: pass a new or empty one" >&2; exit 2
fi
rm -rf "$out" && mkdir -p "$out" && touch "$out/.fault_drill"
export HYDRA_LAUNCHER=${HYDRA_LAUNCHER:-fork} OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
elastic="bash $root/apps/scripts/elastic.sh"

passed=0 failed=0
check() {  # check "what" command...: one line per check; a failure shows the drill's folder's outputs
  local what="$1"; shift
  if "$@"; then echo "  ok      $what"; passed=$((passed + 1)); return; fi
  echo "  FAILED  $what"; failed=$((failed + 1))
  local f; for f in *.txt; do echo "  ===== $PWD/$f (progress lines left out)"; grep -v '^epoch [0-9]* step' "$f" | sed 's/^/  | /'; done
}
has() { grep -q -- "$2" "$1"; }
# Waits up to 60 s for `text` in `file`.
await() { local i; for i in $(seq 600); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }

# 3 classes x 80 training images of 16-20 px: 240 samples, 30 steps per epoch at batch 4 on 2 ranks.
"$build/apps/make_dataset" --out "$out/data" --classes 3 --train-per-class 80 --val-per-class 4 \
  --min-size 16 --max-size 20 --threads 1 > "$out/make_dataset.log" 2>&1 || { echo "fault_drill: make_dataset failed"; exit 1; }
common=(--device cpu --model small_cnn --data "$out/data" --image-size 16 --batch 4 --workers 1 --lr 0.05 --log-every 10)
# ranks, then train_imagenet's arguments; pid.<rank> files in the current folder name the ranks.
launch() { local n=$1; shift; mpiexec -n "$n" sh -c 'echo $$ > pid.$PMI_RANK; exec "$@"' sh "$app" "${common[@]}" "$@"; }
# Every checkpoint in $1 loads and validates (on one rank); no temporary of a write is left.
all_load() {
  local f ok=0
  for f in "$1"/checkpoint_*.safetensors; do
    [ -e "$f" ] || continue
    local log; log="$(dirname "$1")/evaluate_$(basename "$f").log"
    "$app" "${common[@]}" --evaluate --resume "$f" > "$log" 2>&1 && has "$log" "evaluate: " \
      || { echo "    does not load: $f (see $log)"; ok=1; }
  done
  if ls "$1" | grep -q '\.tmp\.'; then echo "    temporaries left: $(ls "$1" | grep '\.tmp\.' | tr '\n' ' ')"; ok=1; fi
  return $ok
}
# The last progress line of a log reaches its last step ("step N/N") with the LR near 0 (cosine).
ends_at_schedule_end() {
  local last; last=$(grep -E '^epoch [0-9]+ step [0-9]+/[0-9]+ ' "$1" | tail -1)
  [[ "$last" =~ step\ ([0-9]+)/([0-9]+)\ \|.*\|\ lr\ ([^ ]+) ]] || return 1
  [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] && awk -v lr="${BASH_REMATCH[3]}" 'BEGIN { exit !(lr < 1e-3) }'
}

echo "fault_drill: 1. SIGTERM during a save"
d=$out/1_term_in_save && mkdir -p "$d" && cd "$d"
# Epoch 1's checkpoint (step 30) is written at full speed; from step 31 rank 0's disk writes 25 KB/s,
# so epoch 2's (196 KB) takes 8 s, and with a 4 s collective timeout rank 1 waits through the
# watchdog's busy check - its note is the cue that the save is under way. (Timeouts under 4 s
# flake on a loaded disk: the final fsync reports no progress.)
TANDEM_COMM_TIMEOUT_S=4 TANDEM_FAULT=0:31:slow-checkpoint:25KB/s \
  $elastic --ranks 2 --max-restarts 0 --log-dir logs -- "$app" "${common[@]}" --epochs 10 --checkpoint-dir ck > out.txt 2>&1 &
sup=$!
await out.txt "is waiting for rank 0 (busy writing checkpoint" && kill -TERM $sup
wait $sup; rc=$?
check "the supervisor passes the preemption on with status 75 (got $rc)" [ "$rc" = 75 ]
check "the signal landed during a save, which completed" has out.txt "checkpoint: ck/checkpoint_epoch2.safetensors"
# mpiexec signals the ranks one after the other; a step boundary between them counts the first alone.
check "every rank stopped at one step" has out.txt "^preempted: SIGTERM on [12] of 2 rank(s); stopped after step"
check "every checkpoint loads, no temporaries" all_load ck
$elastic --ranks 2 --max-restarts 0 --log-dir logs2 -- "$app" "${common[@]}" --epochs 10 --checkpoint-dir ck --resume auto \
  > resume.txt 2>&1
check "the resumed run reaches the end" has resume.txt "elastic: done after 1 attempt"
check "  ... from the preemption's checkpoint" has resume.txt "resumed from ck/checkpoint_epoch3_step"

echo "fault_drill: 2. SIGKILL of one rank"
d=$out/2_kill_rank && mkdir -p "$d" && cd "$d"
(TANDEM_FAULT=1:1:slow:20ms launch 2 --epochs 4 --checkpoint-dir ck > out.txt 2>&1; echo $? > rc.txt) &
await out.txt "step 40/" && kill -KILL "$(cat pid.1)"
wait
check "the job ends, not zero (got $(cat rc.txt))" [ "$(cat rc.txt)" != 0 ]
check "every checkpoint loads, no temporaries" all_load ck
launch 2 --epochs 4 --checkpoint-dir ck --resume auto > resume.txt 2>&1
check "--resume auto continues from the last epoch end" has resume.txt "resumed from ck/checkpoint_epoch1.safetensors"
check "  ... and reaches the end" has resume.txt "checkpoint: ck/checkpoint_epoch4.safetensors"

echo "fault_drill: 2b. SIGKILL of the writing rank in the middle of a save"
d=$out/2b_kill_in_save && mkdir -p "$d" && cd "$d"
# From step 31 rank 0's disk writes 20 KB/s: epoch 2's checkpoint takes 10 s; rank 1's note after
# the 4 s timeout says the write is under way, and rank 0 dies in it.
(TANDEM_COMM_TIMEOUT_S=4 TANDEM_FAULT=0:31:slow-checkpoint:20KB/s launch 2 --epochs 4 --checkpoint-dir ck > out.txt 2>&1
 echo $? > rc.txt) &
await out.txt "is waiting for rank 0 (busy writing checkpoint" && kill -KILL "$(cat pid.0)"
wait
check "the job ends, not zero (got $(cat rc.txt))" [ "$(cat rc.txt)" != 0 ]
check "the killed write left its temporary" bash -c 'ls ck | grep -q "\.tmp\."'
launch 2 --epochs 4 --checkpoint-dir ck --resume auto > resume.txt 2>&1
check "the next start removes it, resumes and reaches the end" has resume.txt "checkpoint: ck/checkpoint_epoch4.safetensors"
check "every checkpoint loads, no temporaries" all_load ck

echo "fault_drill: 3. a slow disk"
d=$out/3_slow_disk && mkdir -p "$d" && cd "$d"
TANDEM_COMM_TIMEOUT_S=4 TANDEM_FAULT=0:1:slow-checkpoint:25KB/s launch 2 --epochs 1 --checkpoint-dir ck > out.txt 2>&1
rc=$?
check "an 8 s write against a 4 s timeout: the job finishes (got $rc)" [ "$rc" = 0 ]
check "  ... rank 1 waited for rank 0's announced write" has out.txt "is waiting for rank 0 (busy writing checkpoint"
check "every checkpoint loads, no temporaries" all_load ck

echo "fault_drill: 4. two jobs on one folder"
d=$out/4_two_jobs && mkdir -p "$d" && cd "$d"
(TANDEM_FAULT=1:1:slow:20ms launch 2 --epochs 4 --checkpoint-dir ck > first.txt 2>&1; echo $? > rc.txt) &
await first.txt "step 10/"
first_pid=$(cat pid.0)
launch 2 --epochs 4 --checkpoint-dir ck --resume auto > second.txt 2>&1
rc=$?
wait
check "the second job is refused (got $rc)" [ "$rc" != 0 ]
check "  ... naming the first (pid $first_pid)" has second.txt "is in use by another job: pid $first_pid"
check "the first job finishes undisturbed (got $(cat rc.txt))" [ "$(cat rc.txt)" = 0 ]
check "every checkpoint loads, no temporaries" all_load ck

echo "fault_drill: 5. a resume on another world size"
d=$out/5_world_size && mkdir -p "$d" && cd "$d"
(TANDEM_FAULT=1:1:slow:20ms launch 2 --epochs 4 --checkpoint-dir ck > out.txt 2>&1; echo $? > rc.txt) &
await out.txt "step 40/" && kill -TERM "$(cat pid.0)" "$(cat pid.1)"
wait
check "preempted on 2 ranks with status 75 (got $(cat rc.txt))" [ "$(cat rc.txt)" = 75 ]
python3 "$root/apps/scripts/run_status.py" ck > status.txt
rc=$?
check "  ... and the folder says so whatever mpiexec returned (run_status.py: $rc)" [ "$rc" = 75 ]
launch 1 --epochs 4 --checkpoint-dir ck --resume auto > resume.txt 2>&1
rc=$?
check "resumed on 1 rank from the mid-epoch checkpoint" has resume.txt "resumed from ck/checkpoint_epoch2_step"
check "  ... reaches the end (got $rc)" [ "$rc" = 0 ]
check "  ... where the schedule ends: last step, LR near 0" ends_at_schedule_end resume.txt
check "every checkpoint loads, no temporaries" all_load ck

echo "fault_drill: 6. a resume into another run's folder"
d=$out/6_foreign_resume && mkdir -p "$d" && cd "$d"
launch 1 --epochs 2 --checkpoint-dir ckX > x.txt 2>&1
launch 1 --epochs 1 --checkpoint-dir ckY > y.txt 2>&1
md5sum ckX/checkpoint_*.safetensors > x.md5
launch 1 --epochs 3 --checkpoint-dir ckX --resume ckY/checkpoint_epoch1.safetensors > refused.txt 2>&1
rc=$?
check "run Y's file into run X's folder is refused with status 2 (got $rc)" [ "$rc" = 2 ]
check "  ... saying the folder belongs to another run" has refused.txt "belongs to another run"
check "  ... and X's files are untouched" md5sum --quiet -c x.md5
launch 1 --epochs 3 --checkpoint-dir ckX --resume ckY/checkpoint_epoch1.safetensors --overwrite-checkpoints \
  > overwrite.txt 2>&1
rc=$?
check "with --overwrite-checkpoints it continues (got $rc)" [ "$rc" = 0 ]
check "  ... and X's files are still untouched" md5sum --quiet -c x.md5
check "  ... Y's files took names of their own" bash -c 'ls ckX | grep -q "checkpoint_epoch2\.run-.*\.safetensors"'
check "every checkpoint loads, no temporaries" all_load ckX

echo "fault_drill: 7. kill -9, then an immediate restart, ten times"
d=$out/7_kill_restart && mkdir -p "$d" && cd "$d"
refused=0
for i in $(seq 10); do
  rm -f pid.0
  (TANDEM_FAULT=0:1:slow:20ms launch 1 --epochs 4 --checkpoint-every 5 --checkpoint-dir ck --resume auto > run$i.txt 2>&1; echo $? > rc$i.txt) &
  await run$i.txt "step [0-9]*/\|is in use by another job" || break
  [ -s pid.0 ] && kill -KILL "$(cat pid.0)"  # and restart at once: rank 0 may still be an unreaped zombie
done
wait
for i in $(seq 10); do has run$i.txt "is in use by another job" && refused=$((refused + 1)); done
check "no restart of 10 refused (refused: $refused)" [ "$refused" = 0 ]
launch 1 --epochs 4 --checkpoint-every 5 --checkpoint-dir ck --resume auto > final.txt 2>&1
rc=$?
check "the last restart reaches the end (got $rc)" [ "$rc" = 0 ]
check "every checkpoint loads, no temporaries" all_load ck
python3 "$root/apps/scripts/run_status.py" ck > status.txt
rc=$?
check "run_status.py: completed, status 0 (got $rc: $(cat status.txt))" bash -c "[ $rc = 0 ] && grep -q '^completed' status.txt"

echo "fault_drill: 8. a corrupted newest checkpoint"
d=$out/8_corrupt && mkdir -p "$d" && cd "$d"
launch 1 --epochs 2 --checkpoint-dir ck > first.txt 2>&1
# 100 floats set to 1e30 inside the data section: finite, so no NaN check sees them
python3 - ck/checkpoint_epoch2.safetensors <<'PY'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    f.seek(8 + n + 64)
    f.write(struct.pack("<100f", *([1e30] * 100)))
PY
"$app" "${common[@]}" --evaluate --resume ck/checkpoint_epoch2.safetensors > evaluate.txt 2>&1
rc=$?
check "--evaluate of the corrupted file fails with status 65 (got $rc)" [ "$rc" = 65 ]
check "  ... naming the damaged tensor" has evaluate.txt "does not match its digest"
launch 1 --epochs 3 --checkpoint-dir ck --resume auto > resume.txt 2>&1
rc=$?
check "--resume auto skips it, says so and reaches the end (got $rc)" [ "$rc" = 0 ]
check "  ... from the newest intact file" has resume.txt "newest intact one, checkpoint_epoch1.safetensors"

echo "fault_drill: 9. a truncated newest checkpoint"
d=$out/9_truncated && mkdir -p "$d" && cd "$d"
launch 1 --epochs 2 --checkpoint-dir ck > first.txt 2>&1
truncate -s $(( $(stat -c %s ck/checkpoint_epoch2.safetensors) / 2 )) ck/checkpoint_epoch2.safetensors
launch 1 --epochs 3 --checkpoint-dir ck --resume auto > resume.txt 2>&1
rc=$?
check "--resume auto skips it, says so and reaches the end (got $rc)" [ "$rc" = 0 ]
check "  ... from the newest intact file" has resume.txt "newest intact one, checkpoint_epoch1.safetensors"
check "  ... naming the truncation" has resume.txt "truncated"

echo "fault_drill: $passed check(s) passed, $failed failed; logs in $out"
[ "$failed" -eq 0 ]
