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
fe=$root/.deps/cudnn_frontend
if command -v nvcc >/dev/null && [ ! -f "$fe/include/cudnn_frontend.h" ] && [ -z "${CUDNN_FRONTEND_INCLUDE_DIR:-}" ]; then
  if ! python3 -m pip --version >/dev/null 2>&1 && command -v apt-get >/dev/null; then
    echo "setup: installing python3-pip (to fetch the cuDNN frontend's headers)"
    ${SUDO:-$([ "$(id -u)" -ne 0 ] && echo sudo)} apt-get install -y -qq --no-install-recommends python3-pip >/dev/null || true
  fi
  whl=$(mktemp -d)
  if python3 -m pip download -q --no-deps --only-binary=:all: -d "$whl" \
       "nvidia-cudnn-frontend${CUDNN_FRONTEND_VERSION:+==$CUDNN_FRONTEND_VERSION}" >/dev/null 2>&1 &&
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
echo "setup: building in $build with $jobs jobs"
cmake --build "$build" -j "$jobs"
