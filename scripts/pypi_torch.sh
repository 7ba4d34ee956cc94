#!/usr/bin/env bash
# scripts/pypi_torch.sh: trickle's Python package against a current PyPI torch (not only
# Debian's 1.13): makes a virtual environment with torch from PyPI (its Linux wheel, which
# carries CUDA libraries and runs on a CPU-only machine), builds the package there (CPU
# build) and runs the Python tests (tests/python/run.sh), then compiles
# comm::process_group_cuda and the model wrappers over it (tests/torch/process_group_cuda_compile.cpp)
# against that torch's CUDA headers with g++, where the CUDA toolkit's headers are found.
#
#   scripts/pypi_torch.sh                 # torch $TRICKLE_PYPI_TORCH (default below)
#   TRICKLE_PYPI_VENV=dir scripts/pypi_torch.sh   # where the environment lives (default build/pypi-torch)
#
# The download is about 5 GB the first time (torch and its nvidia-* wheels); the
# environment is kept and reused. Called by scripts/test.sh; set TRICKLE_NO_PYPI=1 there
# to skip it (no network, say).
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

say "pypi_torch: the package and its tests against this torch"
TRICKLE_PYTHON="$VENV/bin/python" TRICKLE_VENV="$VENV" TRICKLE_BUILD_DIR="$VENV/trickle-build" \
    MAX_JOBS=${MAX_JOBS:-2} bash "$ROOT/tests/python/run.sh" --no-example

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
