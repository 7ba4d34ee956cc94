#!/usr/bin/env bash
# scripts/pypi_torch.sh: trickle's Python package against a current PyPI torch (not only
# Debian's 1.13): makes a virtual environment with torch from PyPI (its Linux wheel, which
# carries CUDA libraries and runs on a CPU-only machine), builds the package there (its
# CUDA build where the toolkit's nvcc is found, below) and runs the Python tests
# (tests/python/run.sh), then compiles
# comm::process_group_cuda and the model wrappers over it (tests/torch/process_group_cuda_compile.cpp)
# against that torch's CUDA headers with g++, where the CUDA toolkit's headers are found.
#
#   scripts/pypi_torch.sh                 # torch $TRICKLE_PYPI_TORCH (default below)
#   TRICKLE_PYPI_VENV=dir scripts/pypi_torch.sh   # where the environment lives (default build/pypi-torch)
#
# The download is about 5 GB the first time (torch and its nvidia-* wheels); the
# environment is kept and reused. scripts/test.sh runs it when TRICKLE_PYPI=1 is set (not
# in every CI run: the download and about 20 minutes of compiling on 2 cores; CI's CUDA
# phase compiles the package's nvcc units, tests/cuda/CMakeLists.txt's
# trickle_python_cuda_engines, without torch).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TORCH_SPEC=${TRICKLE_PYPI_TORCH:-torch==2.15.0}
VENV=${TRICKLE_PYPI_VENV:-$ROOT/build/pypi-torch}
BASE_PY=${TRICKLE_PYTHON_BASE:-/usr/bin/python3}
say() { printf '\n== %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
    say "pypi_torch: creating $VENV with $TORCH_SPEC from PyPI"
    t0=$SECONDS
    rm -rf "$VENV"
    "$BASE_PY" -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip >/dev/null
    if ! "$VENV/bin/pip" install -q "$TORCH_SPEC" numpy setuptools wheel ninja; then
        echo "pypi_torch: pip could not install $TORCH_SPEC (is PyPI reachable?)" >&2
        exit 1
    fi
    echo "installed in $(( SECONDS - t0 )) s"
fi
"$VENV/bin/python" -c 'import torch; print("torch", torch.__version__, "| CUDA", torch.version.cuda)'

# The CUDA build where this torch has CUDA and the toolkit's nvcc is here (PyPI's Linux
# torch has CUDA; this machine's toolkit is /usr/local/cuda): the package's engines over
# CUDA parameters compiled by nvcc, the CPU tests run against that build (which steps CPU
# tensors as the CPU-only one does), and tests/python/test_cuda.py skips without a GPU.
# $TRICKLE_PYPI_CUDA_ARCHS (default 9.0: one architecture keeps the compile in CI's time;
# the library's CMake build compiles every kernel for 8.0 and 9.0) sets the GPU
# architectures; TRICKLE_CUDA=0 makes the CPU-only build instead.
if [ -z "${TRICKLE_CUDA:-}" ] && "$VENV/bin/python" -c 'import sys, torch; sys.exit(0 if torch.version.cuda else 1)' &&
    { command -v nvcc >/dev/null || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; }; then
    export TRICKLE_CUDA=1 TORCH_CUDA_ARCH_LIST=${TRICKLE_PYPI_CUDA_ARCHS:-9.0}
    say "pypi_torch: the package's CUDA build (architectures $TORCH_CUDA_ARCH_LIST) and its tests against this torch"
else
    say "pypi_torch: the package and its tests against this torch (TRICKLE_CUDA=${TRICKLE_CUDA:-auto})"
fi
TRICKLE_PYTHON="$VENV/bin/python" TRICKLE_VENV="$VENV" TRICKLE_BUILD_DIR="$VENV/trickle-build" \
    MAX_JOBS=${MAX_JOBS:-2} bash "$ROOT/tests/python/run.sh" --no-example
"$VENV/bin/python" -c 'import trickle; i = trickle.build_info(); print("trickle build: cuda", i["cuda"], i["cuda_version"], i["cuda_archs"])'
if [ "${TRICKLE_CUDA:-}" = 1 ]; then
    "$VENV/bin/python" -c 'import sys, trickle; sys.exit(0 if trickle.build_info()["cuda"] else 1)' ||
        { echo "pypi_torch: TRICKLE_CUDA=1 but the installed trickle is not a CUDA build" >&2; exit 1; }
fi

cuda_include=""
for d in "${CUDA_HOME:-}/include" /usr/local/cuda/include; do
    [ -f "$d/cuda_runtime_api.h" ] && { cuda_include=$d; break; }
done
if [ -z "$cuda_include" ]; then
    say "pypi_torch: no CUDA toolkit headers found; comm::process_group_cuda not compiled"
    exit 0
fi
say "pypi_torch: comm::process_group_cuda and the wrappers over it, with g++ against this torch's CUDA headers"
T=$("$VENV/bin/python" -c 'import torch.utils.cpp_extension as c; print(c.include_paths()[0])')
t0=$SECONDS
g++ -std=c++20 -fsyntax-only -Wall -Wextra -Werror -Wno-deprecated-declarations \
    -DTRICKLE_ENABLE_CUDA=1 -DUSE_C10D_GLOO=1 -DTRICKLE_HAS_TORCH=1 \
    -I "$ROOT/include" -isystem "$T" -isystem "$T/torch/csrc/api/include" -isystem "$cuda_include" \
    "$ROOT/tests/torch/process_group_cuda_compile.cpp"
echo "-- process_group_cuda_compile: compiled ($(( SECONDS - t0 )) s)"
