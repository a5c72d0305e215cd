#!/usr/bin/env bash
# apps/scripts/setup.sh: installs what tandem needs (if missing), configures and builds it.
#
# Used by the README's two commands; safe to run again (it only does what is missing).
#   - Debian packages: mpich, OpenBLAS, doctest, stb, nlohmann-json, CLI11, cmake, ninja, ccache.
#     Installed with apt-get when absent (as root, or through sudo).
#   - oneDNN (libdnnl-dev, Debian 12's 2.6): the CPU convolutions; optional - when apt has no such
#     package the build goes on and says the CPU convs run the im2col + OpenBLAS reference.
#   - CUDA: used when nvcc is found (PATH or /usr/local/cuda/bin); otherwise a CPU-only build.
#     Override with TANDEM_CMAKE_ARGS="-DTANDEM_CUDA=OFF" or "-DCMAKE_CUDA_ARCHITECTURES=90;100".
#   - Build folder: $TANDEM_BUILD_DIR (default: build/ in the project root).
#   - Targets: $TANDEM_BUILD_TARGETS (default: all); the main-job scripts build only what they run,
#     so the first run does not wait for the tests and benchmarks (test_all.sh builds everything).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TANDEM_BUILD_DIR:-$root/build}

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in build-essential cmake ninja-build ccache mpich libmpich-dev libopenblas-dev doctest-dev libstb-dev \
         nlohmann-json3-dev libcli11-dev; do
  have_pkg "$p" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# oneDNN for the CPU convolutions (third_party/README.md: why Debian's 2.6). Optional, so on its own:
# a distribution without the package still builds, with the reference convs (CMake says so).
if ! have_pkg libdnnl-dev && command -v apt-get >/dev/null; then
  echo "setup: installing libdnnl-dev (oneDNN, the CPU convolutions)"
  if ! ${SUDO:-$([ "$(id -u)" -ne 0 ] && echo sudo)} env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends libdnnl-dev >/dev/null 2>&1; then
    echo "setup: libdnnl-dev not installable here: CPU convolutions will run the im2col + OpenBLAS reference"
  fi
fi

if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

# cuDNN's frontend (header-only C++ graph API) for the CUDA build: Debian has no package, PyPI has
# nvidia-cudnn-frontend, whose wheel ships include/. Debian's pip refuses system-wide installs, so the
# wheel is downloaded and only its include/ unpacked, into .deps/ (ignored by git). CMake finds it
# there (third_party/CMakeLists.txt); without it the build goes on with those paths off.
# Pinned: the graphs in core/ops/conv/cuda_graph.cpp and core/ops/attention/cuda_cudnn_sdpa.cpp were
# checked against 1.32.0 (tests/cpu_cudnn_graphs.cpp); CUDNN_FRONTEND_VERSION=... picks another.
CUDNN_FRONTEND_VERSION=${CUDNN_FRONTEND_VERSION:-1.32.0}
fe=$root/.deps/cudnn_frontend
if [ -f "$fe/include/cudnn_frontend_version.h" ]; then
  have=$(awk '/define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION/ {v = v (v == "" ? "" : ".") $3} END {print v}' \
         "$fe/include/cudnn_frontend_version.h")
  [ "$have" = "$CUDNN_FRONTEND_VERSION" ] ||
    echo "setup: warning: .deps/cudnn_frontend holds frontend $have, not the pinned $CUDNN_FRONTEND_VERSION; remove .deps/cudnn_frontend to fetch the pinned one" >&2
fi
if command -v nvcc >/dev/null && [ ! -f "$fe/include/cudnn_frontend.h" ] && [ -z "${CUDNN_FRONTEND_INCLUDE_DIR:-}" ]; then
  if ! python3 -m pip --version >/dev/null 2>&1 && command -v apt-get >/dev/null; then
    echo "setup: installing python3-pip (to fetch the cuDNN frontend's headers)"
    ${SUDO:-$([ "$(id -u)" -ne 0 ] && echo sudo)} apt-get install -y -qq --no-install-recommends python3-pip >/dev/null || true
  fi
  whl=$(mktemp -d)
  if python3 -m pip download -q --no-deps --only-binary=:all: -d "$whl" \
       "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION" >/dev/null 2>&1 &&
     mkdir -p "$fe" && python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])' "$(ls "$whl"/*.whl | head -1)" "$fe"; then
    echo "setup: cuDNN frontend headers in $fe/include ($(basename "$(ls "$whl"/*.whl | head -1)"))"
  else
    echo "setup: warning: could not fetch nvidia-cudnn-frontend from PyPI; building without cuDNN's frontend (fused attention and conv-BN graphs off)" >&2
  fi
  rm -rf "$whl"
fi

# ccache keeps rebuilds (and CI runs on a reused machine) fast; its cache is keyed by content.
export CCACHE_BASEDIR=$root
jobs=$(nproc)
if [ ! -f "$build/build.ninja" ]; then
  # shellcheck disable=SC2086
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${TANDEM_CMAKE_ARGS:-}
fi
# nvcc without a GPU (a CUDA toolkit on a laptop or CI VM) means a CUDA build, several times slower
# and of kernels this machine cannot run: say so, and how to build for the CPU only.
if command -v nvcc >/dev/null && ! nvidia-smi -L 2>/dev/null | grep -q GPU &&
   [[ "${TANDEM_CMAKE_ARGS:-}" != *TANDEM_CUDA=OFF* ]] && grep -q "TANDEM_CUDA:BOOL=ON" "$build/CMakeCache.txt" 2>/dev/null; then
  echo "setup: note: nvcc is installed but no NVIDIA GPU is visible, so this is a CUDA build (slower, and its" \
       "GPU code cannot run here). For a CPU-only build: rm -rf $build; TANDEM_CMAKE_ARGS=-DTANDEM_CUDA=OFF bash $0" >&2
fi
targets=${TANDEM_BUILD_TARGETS:-}
echo "setup: building ${targets:-everything} in $build with $jobs jobs"
# shellcheck disable=SC2086
cmake --build "$build" -j "$jobs" ${targets:+--target $targets}
