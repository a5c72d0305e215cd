#!/usr/bin/env bash
# tests/test_emulated_cluster.sh: train_imagenet across emulated hosts (apps/scripts/emulated_cluster.sh:
# network namespaces joined by a bridge, TCP between them, each host's own --local folder; issue 28,
# item 1). Exits 77 (skipped), with the reason, where namespaces cannot be made (no root, a container).
#   1. DDP, ZeRO-2 and ZeRO-3 on 2 hosts x 2 ranks end with the same weights and optimizer state,
#      bit for bit, as on 1 host x 4 ranks (plain mpiexec).
#   2. The data folder on host 0's local disk only: every rank stops at start-up, naming host 1.
#   3. The checkpoint folder on each host's local disk: refused at start-up (status 2), naming host 1.
#   4. SIGTERM to every rank mid-run: status 75, a checkpoint, and --resume auto finishes the run.
#   5. Host 1's link stalls mid-run: the watchdog names its rank within the timeout.
#   6. Rootless: as user nobody the script makes its hosts inside a user namespace (skipped, saying
#      so, where unprivileged user namespaces are refused).
# Tiny model, few steps: about a minute on 2 cores. ctest runs it as `emulated_cluster` (label scripts).
#   bash tests/test_emulated_cluster.sh BUILD_DIR [OUT_DIR]
set -u -o pipefail
src=${TANDEM_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
build=${1:?usage: test_emulated_cluster.sh BUILD_DIR [OUT_DIR]}
out=${2:-$(mktemp -d)}
rm -rf "$out" && mkdir -p "$out" && cd "$out" || exit 2
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 TANDEM_COMM_TIMEOUT_S=10
app=$build/apps/train_imagenet
name=tdmt$$  # this test's namespaces: tdmt<pid>n<k>h0.., removed at the end whatever happens
calls=0
# cluster SECONDS ARGS...: emulated_cluster.sh under a time limit (SIGTERM, so that it cleans up; SIGKILL
# 10 s later). Each call has namespaces of its own, so one killed before its cleanup cannot spoil the next.
cluster() {
  local limit=$1; shift
  calls=$((calls + 1))
  timeout -k 10 -s TERM "$limit" bash "$src/apps/scripts/emulated_cluster.sh" --name "${name}n$calls" "$@"
}
trap 'for ns in $(ip netns list 2> /dev/null | awk "{print \$1}" | grep "^$name"); do
        p=$(ip netns pids $ns); [ -n "$p" ] && kill -KILL $p; ip netns del $ns; done 2> /dev/null' EXIT

cluster 60 --hosts 1 --ranks-per-host 1 -- true 2> probe.txt
rc=$?
if [ "$rc" = 77 ]; then sed -n 's/^emulated_cluster: SKIPPED: /test_emulated_cluster: skipped: /p' probe.txt; exit 77; fi
[ "$rc" = 0 ] || { echo "emulated_cluster.sh failed on 'true' (status $rc)"; cat probe.txt; exit 1; }

failed=0
check() {
  local what="$1"; shift
  if "$@"; then echo "ok      $what"; else echo "FAILED  $what"; failed=$((failed + 1)); fi
}
has() { grep -q -- "$2" "$1"; }

# Two safetensors files hold the same tensors bit for bit, and the same metadata but the save time.
same_checkpoint() {
  python3 - "$1" "$2" <<'EOF'
import json, struct, sys
def read(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    meta.pop("saved_at", None)
    return h, meta, b[8 + n:]
a, b = read(sys.argv[1]), read(sys.argv[2])
for what, x, y in (("tensor table", a[0], b[0]), ("metadata", a[1], b[1]), ("tensor bytes", a[2], b[2])):
    if x != y:
        print("differ in", what, {k: (x.get(k), y.get(k)) for k in x if x.get(k) != y.get(k)} if isinstance(x, dict) else "")
        sys.exit(1)
print("same:", len(a[0]), "tensors,", len(a[2]), "bytes")
EOF
}

common=(--device cpu --model small_cnn --synthetic --synthetic-size 64 --image-size 16 --batch 4 --workers 0
        --lr 0.05 --log-every 1 --run-id same)
echo "--- 1. 2 hosts x 2 ranks == 1 host x 4 ranks, bit for bit"
for s in ddp zero2 zero3; do
  case $s in ddp) flags=() ;; zero2) flags=(--zero 2) ;; zero3) flags=(--zero 3) ;; esac
  HYDRA_LAUNCHER=fork timeout -s KILL 120 mpiexec -n 4 "$app" "${common[@]}" "${flags[@]}" --steps 3 \
    --checkpoint-dir one_$s > one_$s.txt 2>&1
  rc1=$?
  cluster 120 --hosts 2 --ranks-per-host 2 -- "$app" "${common[@]}" "${flags[@]}" --steps 3 \
    --checkpoint-dir two_$s > two_$s.txt 2>&1
  rc2=$?
  check "$s: both runs finished (status $rc1, $rc2)" eval '[ "$rc1" = 0 ] && [ "$rc2" = 0 ]'
  check "$s: the 2x2 run had its ranks on tdm-h0 and tdm-h1" has two_$s.txt "2 host(s) x 2 rank(s)"
  a=$(ls one_$s/*.safetensors 2> /dev/null | tail -1) b=$(ls two_$s/*.safetensors 2> /dev/null | tail -1)
  check "$s: the final checkpoints are the same bit for bit" same_checkpoint "${a:-none}" "${b:-none}"
done

echo "--- 2. the data folder only on host 0's local disk"
"$build/apps/make_dataset" --out data --classes 2 --train-per-class 8 --val-per-class 2 --min-size 16 \
  --max-size 20 --threads 1 > make_dataset.log 2>&1 || { echo "make_dataset failed"; cat make_dataset.log; exit 1; }
# Rank 0 (on tdm-h0) copies the data onto its host's local disk; host 1's stays empty.
t0=$SECONDS
cluster 60 --hosts 2 --ranks-per-host 1 --local "$out/local" -- bash -c \
  '[ "$PMI_RANK" = 0 ] && cp -r data "$0/data"; exec "$@"' "$out/local" \
  "$app" --device cpu --model small_cnn --data "$out/local/data" --image-size 16 --batch 4 --steps 2 > data.txt 2>&1
rc=$? took=$((SECONDS - t0))
check "every rank stopped at start-up, non-zero, within 30 s (status $rc, $took s)" \
  eval '[ "$rc" != 0 ] && [ "$rc" -lt 124 ] && [ "$took" -le 30 ]'
check "rank 0 names rank 1 on tdm-h1 and the missing folder" has data.txt "rank 1 on tdm-h1: .*local/data"

echo "--- 3. the checkpoint folder on each host's local disk: refused at start-up"
t0=$SECONDS
cluster 60 --hosts 2 --ranks-per-host 1 --local "$out/local" -- "$app" "${common[@]}" --steps 2 \
  --checkpoint-dir "$out/local/ck" > local_ck.txt 2>&1
rc=$? took=$((SECONDS - t0))
check "status 2 within 30 s (status $rc, $took s)" eval '[ "$rc" = 2 ] && [ "$took" -le 30 ]'
check "rank 0 names rank 1 on tdm-h1 and says the folder must be shared" \
  has local_ck.txt "rank 1 on tdm-h1: --checkpoint-dir .*local/ck here is not the folder rank 0 opened"

echo "--- 4. SIGTERM to every rank mid-run: 75 on every host, then the run resumes"
# Rank 0 sleeps 100 ms a step, so step 5 comes after the start-up and well before step 40.
TANDEM_FAULT=0:1:slow:100ms timeout -k 10 -s TERM 120 bash "$src/apps/scripts/emulated_cluster.sh" --name "${name}term" --hosts 2 --ranks-per-host 2 -- "$app" "${common[@]}" \
  --steps 40 --checkpoint-dir ck_term > term.txt 2>&1 &
job=$!
for i in $(seq 600); do grep -q "step 5/" term.txt 2> /dev/null && break; sleep 0.1; done
# To the script alone (a signal to `timeout` would reach its whole process group, mpiexec included,
# and the ranks would get it twice): the script sends it to every rank on both hosts, as a scheduler would.
kill -TERM $(pgrep -P $job)
wait $job
rc=$?
check "status 75 (got $rc)" [ "$rc" = 75 ]
check "every rank of both hosts got the signal" eval '[ "$(grep -c "SIGTERM received: finishing" term.txt)" = 4 ]'
check "rank 0 wrote the stop's checkpoint (the ranks agreed on one step, whichever host heard it first)" has term.txt "^preempted: SIGTERM on [1-4] of 4 rank"
cluster 120 --hosts 2 --ranks-per-host 2 -- "$app" "${common[@]}" --steps 40 \
  --checkpoint-dir ck_term --resume auto > resume.txt 2>&1
rc=$?
check "the resumed run finished (status $rc)" [ "$rc" = 0 ]
check "  ... from the stop's checkpoint" has resume.txt "resumed from ck_term/"
check "  ... to step 40" has resume.txt "step 40/40"

echo "--- 5. host 1's link stalls mid-run: the watchdog names its rank"
t0=$SECONDS
cluster 40 --hosts 2 --ranks-per-host 1 --stall-host 1 --stall-after 4 -- "$app" "${common[@]}" \
  --checkpoint-dir ck_stall --steps 100000 > stall.txt 2>&1
rc=$? took=$((SECONDS - t0))
check "the job ended non-zero (status $rc, $took s)" [ "$rc" != 0 ]
check "the link stalled" has stall.txt "tdm-h1's link stalled"
check "rank 0's watchdog named rank 1 and its host" \
  has stall.txt "\[rank 0\] tandem watchdog: rank(s) 1 did not reach collective.* Rank 1 runs on host tdm-h1\."

echo "--- 6. rootless: as an ordinary user (nobody), the script makes its hosts in a user namespace"
# Skipped (said, not failed) where there is no 'nobody', no su, or no unprivileged user namespaces.
if id nobody > /dev/null 2>&1 && command -v su > /dev/null &&
   su -s /bin/bash nobody -c 'unshare -r -n -m true' 2> /dev/null; then
  mkdir -p rootless && chmod 777 rootless
  su -s /bin/bash nobody -c "cd '$out/rootless' && OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 timeout -k 10 -s TERM 90 \
    bash '$src/apps/scripts/emulated_cluster.sh' --hosts 2 --ranks-per-host 1 --rate 1gbit -- '$app' \
    ${common[*]} --checkpoint-dir ck --steps 3 --metrics m.json" > rootless.txt 2>&1
  rc=$?
  check "the rootless 2-host run finished (status $rc)" [ "$rc" = 0 ]
  check "on 2 hosts" has rootless.txt "2 host(s) x 1 rank(s)"
  check "  ... 2 ranks" has rootless.txt "small_cnn on 2 rank(s)"
  check "  ... its checkpoint written (3 steps into epoch 1)" [ -f rootless/ck/checkpoint_epoch1_step3.safetensors ]
else
  echo "skipped rootless: no user 'nobody', no su, or unprivileged user namespaces refused (unshare -r -n -m)"
fi

if [ "$failed" -gt 0 ]; then echo "test_emulated_cluster: $failed check(s) FAILED (logs in $out)"; exit 1; fi
echo "test_emulated_cluster: all checks passed"
