#!/usr/bin/env bash
# apps/scripts/tsan_dist.sh: the threaded parts of tandem under ThreadSanitizer.
#
# Builds a CPU-only tree with -DTANDEM_SANITIZE=thread ($TANDEM_BUILD_DIR-tsan, default build-tsan/)
# and runs, under TSan, the tests that exercise threads:
#   - the multi-rank tests (mpi_*: the MPI communicator's comm thread, the reducer handing buckets
#     to it, DDP) and test_dist_failures (ranks failing while the comm thread is busy);
#   - the in-process multi-rank tests (test_comm_thread, test_reducer, test_ddp, test_zero: ranks
#     as threads of one process on dist/transport/comm_thread.h, which share one address space);
#   - test_data_loader (the loader's worker threads and its bounded queue).
# Options (TSAN_OPTIONS, suppressions) come from tests/CMakeLists.txt; every suppression is in
# tests/sanitizers/tsan.supp with its reason. The output is written to
# apps/results/<date>-cpu-<n>core/tsan_dist.txt (override with TSAN_RESULTS=file).
# The script exits non-zero when a test fails or TSan reports a race ("WARNING: ThreadSanitizer").
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TANDEM_BUILD_DIR:-$root/build}
tsan=${build}-tsan
out=${TSAN_RESULTS:-$root/apps/results/$(date +%F)-cpu-$(nproc)core/tsan_dist.txt}
mkdir -p "$(dirname "$out")"
export CCACHE_BASEDIR=$root
export HYDRA_LAUNCHER=${HYDRA_LAUNCHER:-fork}

if [ ! -f "$tsan/build.ninja" ]; then
  cmake -S "$root" -B "$tsan" -G Ninja -DTANDEM_CUDA=OFF -DTANDEM_SANITIZE=thread \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1"
fi
cmake --build "$tsan" -j "$(nproc)" --target mpi_collectives mpi_ddp mpi_reducer mpi_sync_batchnorm \
      test_dist_failures dist_fault_helper test_data_loader test_comm_thread test_reducer test_ddp test_zero

tests='^(mpi_collectives|mpi_ddp|mpi_reducer|mpi_sync_batchnorm)_np[0-9]+$|^(dist_failures|data_loader|comm_thread|reducer|ddp|zero)$'
{
  echo "# tsan_dist.sh: $(date -u +%FT%TZ), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# commit $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ' (with local changes)')"
  echo "# suppressions in use (tests/sanitizers/tsan.supp):"
  grep -v '^#' "$root/tests/sanitizers/tsan.supp" | sed '/^$/d; s/^/#   /' | grep . || echo "#   (none)"
  echo
} > "$out"
status=0
(cd "$tsan" && ctest --output-on-failure -V -R "$tests") >> "$out" 2>&1 || status=$?
races=$(grep -c "WARNING: ThreadSanitizer" "$out" || true)
echo "tsan_dist: ctest exit $status, ThreadSanitizer warnings: $races (full output: $out)" | tee -a "$out"
[ "$status" = 0 ] && [ "$races" = 0 ]
