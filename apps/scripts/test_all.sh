#!/usr/bin/env bash
# apps/scripts/test_all.sh: the README's test command (and what .ci/run calls).
# Sets up and builds (apps/scripts/setup.sh), then runs every test with ctest. GPU tests exit 77
# without a GPU and show as Skipped; multi-rank tests run under mpiexec -n 2 and -n 4.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TANDEM_BUILD_DIR:-$root/build}
bash "$root/apps/scripts/setup.sh"
# Local ranks are started by fork; naming it keeps hydra from probing for ssh on bare machines.
export HYDRA_LAUNCHER=${HYDRA_LAUNCHER:-fork}
cd "$build"
ctest --output-on-failure -j "$(nproc)" "$@"
