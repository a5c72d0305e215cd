#!/usr/bin/env bash
# tests/test_bench_allreduce.sh: apps/bench_allreduce under `mpiexec -n 2` - the emulated-link study's
# input (apps/scripts/study/links.py). Its JSON holds busbw and the CPU's memory-copy rate (copy_GBps,
# the what-if's Network::copy_GBps) for every CPU entry, and it ends with status 0 through the
# trainers' end of job (dist::finalize with a status: a deadline on MPI_Finalize across hosts); a bad
# argument after start-up ends every rank with status 1 and the message, within seconds; --in-flight K
# counts K messages' bytes in its bandwidths; --collective ps times the parameter server's push and pull.
#   bash tests/test_bench_allreduce.sh BUILD_DIR [OUT_DIR]
set -euo pipefail
build=${1:?usage: test_bench_allreduce.sh BUILD_DIR [OUT_DIR]}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
bench=$build/apps/bench_allreduce
mpiexec=${TANDEM_MPIEXEC:-mpiexec}
py=python3
timeout 60 "$mpiexec" -n 2 "$bench" --min-bytes 1K --max-bytes 2K --reps 2 --warmup 1 --copy-bytes 4M \
  --backend mpi --json "$out/bench.json" > "$out/bench.log" 2>&1 || { cat "$out/bench.log"; echo "FAIL: exit $?"; exit 1; }
"$py" - "$out/bench.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))
assert [x["bytes"] for x in e] == [1024, 2048], e
for x in e:
    assert x["ranks"] == 2 and x["busbw_GBps"] > 0, x
    assert x["copy_GBps"] > 0 and x["copy_bytes"] == 4 << 20, f"no memory-copy rate in {x}"
print(f"bench_allreduce: busbw {e[-1]['busbw_GBps']:.3f} GB/s, copy {e[-1]['copy_GBps']:.2f} GB/s")
PY
# --in-flight 3: three all-reduces at once (DDP's buckets), algbw over all their bytes.
timeout 60 "$mpiexec" -n 2 "$bench" --min-bytes 64K --max-bytes 64K --reps 2 --warmup 1 --copy-bytes 4M \
  --backend mpi --in-flight 3 --json "$out/in_flight.json" > "$out/in_flight.log" 2>&1 ||
  { cat "$out/in_flight.log"; echo "FAIL: --in-flight 3 exited $?"; exit 1; }
"$py" - "$out/in_flight.json" <<'PY'
import json, sys
x = json.load(open(sys.argv[1]))[-1]
assert x["in_flight"] == 3 and x["bytes"] == 64 << 10, x
assert abs(x["algbw_GBps"] - 3 * x["bytes"] / (x["time_us"] * 1e-6) / 1e9) < 1e-6 * x["algbw_GBps"] + 1e-9, x
PY
# --collective ps: the parameter server's push (reduce to rank 0) and pull (broadcast), in pieces; its
# busbw is 2 (n - 1) bytes / time, the server's bytes in and out (the what-if's Network::ps_efficiency).
timeout 60 "$mpiexec" -n 2 "$bench" --collective ps --min-bytes 256K --max-bytes 256K --piece-bytes 64K --reps 2 \
  --warmup 1 --copy-bytes 4M --backend mpi --json "$out/ps.json" > "$out/ps.log" 2>&1 ||
  { cat "$out/ps.log"; echo "FAIL: --collective ps exited $?"; exit 1; }
"$py" - "$out/ps.json" <<'PY'
import json, sys
x = json.load(open(sys.argv[1]))[-1]
assert x["collective"] == "ps" and x["bytes"] == 256 << 10, x
assert abs(x["busbw_GBps"] - 2 * x["bytes"] / (x["time_us"] * 1e-6) / 1e9) < 1e-6 * x["busbw_GBps"] + 1e-9, x
PY
# An error after dist::init: every rank exits 1 with the message (no hang, no abort trace).
set +e
timeout 60 "$mpiexec" -n 2 "$bench" --min-bytes 1X --backend mpi > "$out/bad.log" 2>&1
rc=$?
set -e
grep -q "bench_allreduce: .*unknown size unit 'X'" "$out/bad.log" ||
  { cat "$out/bad.log"; echo "FAIL: no message for a bad --min-bytes"; exit 1; }
[ "$rc" = 1 ] || { cat "$out/bad.log"; echo "FAIL: a bad --min-bytes exited $rc, not 1"; exit 1; }
echo "test_bench_allreduce: all checks passed ($out)"
