#!/usr/bin/env bash
# apps/scripts/test_all.sh: the README's test command (and what .ci/run calls).
# 1. Sets up and builds (apps/scripts/setup.sh), then runs every test with ctest. GPU tests exit 77
#    without a GPU and show as Skipped; multi-rank tests run under mpiexec -n 2 and -n 4.
# 2. Builds a second, CPU-only tree with AddressSanitizer + UndefinedBehaviorSanitizer
#    ($TANDEM_BUILD_DIR-asan, default build-asan/) and runs the whole suite again there: memory
#    errors, leaks in tandem's code and undefined behaviour fail their test. The sanitizer options
#    come from tests/CMakeLists.txt, the leak suppressions from tests/sanitizers/lsan.supp.
#    TANDEM_SKIP_SANITIZERS=1 skips this part for a quick local run; CI never sets it.
# Extra arguments go to both ctest runs (e.g. -R data).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TANDEM_BUILD_DIR:-$root/build}
# Both build trees take ~5 GB (4.7 GB after a clean-clone run), the tests' scratch folders more:
# refuse up front, not with "No space left on device" halfway through a link (stop 36's CI run).
for dir in "$root" "${TMPDIR:-/tmp}"; do
  free_gb=$(df -Pk "$dir" | awk 'NR == 2 { print int($4 / 1048576) }')
  if [ "$free_gb" -lt 6 ]; then
    echo "test_all: only ${free_gb} GB free where $dir is; the builds and tests need about 6 GB." >&2
    echo "test_all: free some space (old test folders: ls -d \${TMPDIR:-/tmp}/tandem_*) and run again." >&2
    exit 1
  fi
done
bash "$root/apps/scripts/setup.sh"
# Local ranks are started by fork; naming it keeps hydra from probing for ssh on bare machines.
export HYDRA_LAUNCHER=${HYDRA_LAUNCHER:-fork}
(cd "$build" && ctest --output-on-failure -j "$(nproc)" "$@")

if [ "${TANDEM_SKIP_SANITIZERS:-0}" = 1 ]; then
  echo "test_all: TANDEM_SKIP_SANITIZERS=1, the ASan/UBSan suite was not run"
  exit 0
fi
asan=${build}-asan
export CCACHE_BASEDIR=$root
start=$SECONDS
if [ ! -f "$asan/build.ninja" ]; then
  # -O2 keeps the training tests quick under the sanitizers' ~2x cost; -g1 (line tables only) gives
  # reports with file:line at a fraction of -g's compile time.
  cmake -S "$root" -B "$asan" -G Ninja -DTANDEM_CUDA=OFF -DTANDEM_SANITIZE=address,undefined \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1"
fi
echo "test_all: building the ASan/UBSan tree in $asan"
cmake --build "$asan" -j "$(nproc)"
echo "test_all: ASan/UBSan build took $((SECONDS - start)) s"
start=$SECONDS
(cd "$asan" && ctest --output-on-failure -j "$(nproc)" "$@")
echo "test_all: ASan/UBSan suite took $((SECONDS - start)) s"
