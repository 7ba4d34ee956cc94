#!/usr/bin/env bash
# Builds trickle and runs every test: the host suites (Debug, ASan + UBSan; with the
# libtorch adapter's suites and example), the MPI suites under mpirun, the consumer
# builds, the Python package's tests under torchrun, the threaded suites again under
# ThreadSanitizer, and — when the CUDA toolkit is present —
# the CUDA build for sm_80 and sm_90, whose GPU tests run where a GPU exists and are
# reported as skipped elsewhere. Installs missing Debian packages when run as root.
#   scripts/test.sh            everything
#   TRICKLE_NO_CUDA=1 scripts/test.sh   host only
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
trickle_install_deps
jobs=$(trickle_jobs)
start=$(date +%s)

echo "== host: configure, build, test (Debug, ASan + UBSan)"
cmake --preset host >/dev/null
cmake --build --preset host -j "$jobs"
ctest --preset host -j "$jobs" --timeout 900

echo "== python: the trickle package built against Debian's PyTorch; its tests and example under torchrun (4 ranks, Gloo)"
MAX_JOBS=$jobs bash tests/python/run.sh

echo "== host-tsan: the threaded communicator and the algorithms under ThreadSanitizer"
cmake --preset host-tsan >/dev/null
cmake --build --preset host-tsan -j "$jobs"
ctest --preset host-tsan -j "$jobs" --timeout 900

nvcc=$(trickle_find_nvcc || true)
if [ -n "$nvcc" ] && [ -z "${TRICKLE_NO_CUDA:-}" ]; then
    echo "== cuda: configure, build (sm_80, sm_90), test ($nvcc)"
    trickle_install_cuda_tools # cuobjdump + nvdisasm for the static SASS check (check_sass)
    cmake --preset cuda -DCMAKE_CUDA_COMPILER="$nvcc" -DTRICKLE_BUILD_BENCHMARKS=ON >/dev/null
    cmake --build --preset cuda -j "$jobs" --target trickle_cuda_checks
    ctest --preset cuda -j "$jobs" --timeout 900 -L cuda
else
    echo "== cuda: skipped (no nvcc found; set up the CUDA toolkit to build the CUDA targets)"
fi
echo "== all tests done in $(( $(date +%s) - start )) s"
