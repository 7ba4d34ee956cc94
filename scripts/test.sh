#!/usr/bin/env bash
# Builds trickle and runs every test: the host suites (Debug, ASan + UBSan, built by clang++;
# the libtorch adapter's suites and example and the -O3 warnings check by g++), the MPI
# suites under mpirun, the consumer builds, the Python package's tests under torchrun
# (against Debian's torch), the threaded suites again under ThreadSanitizer, and — when the
# CUDA toolkit is present — the CUDA build for sm_80 and sm_90 (with the Python package's
# nvcc units), whose GPU tests run where a GPU exists and are reported as skipped elsewhere.
# Installs missing Debian packages when run as root. CI runs it as it is (about 50 minutes
# on 2 cores).
#   scripts/test.sh                     all of the above
#   TRICKLE_NO_CUDA=1 scripts/test.sh   no CUDA build
#   TRICKLE_PYPI=1 scripts/test.sh      also the package against a current PyPI torch, with
#                                       its CUDA build (scripts/pypi_torch.sh: a 5 GB download
#                                       the first time and about 20 minutes on 2 cores, so it
#                                       is not part of every CI run; run it before a release
#                                       and after changing python/ or the CUDA engines)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
trickle_install_deps all
jobs=$(trickle_jobs)
start=$(date +%s)
phase_start=$start
phases=()
# Records how long the phase that just ended took (printed at the end).
phase() {
    local now
    now=$(date +%s)
    phases+=("$1: $(( now - phase_start )) s")
    phase_start=$now
}

# The host suites in two trees: clang++ builds and runs everything it can (about half g++'s
# time under the sanitizers), and a g++ tree adds what clang cannot build or must not stand
# in for: the libtorch adapter's targets (Debian's torch 1.13 headers need g++ in C++20)
# and o3_paths, g++'s -O3 -Wall -Wextra -Werror build of the headers' optimized paths.
# (cmake --preset host builds all of it with g++ alone.)
echo "== host: configure, build, test (Debug, ASan + UBSan, clang++; all but the libtorch adapter's targets)"
cmake --preset host-clang >/dev/null
cmake --build --preset host-clang -j "$jobs"
ctest --preset host-clang -j "$jobs" --timeout 900
phase "host (clang++: build and tests)"

echo "== host-gcc: the libtorch adapter's targets and g++'s -O3 warnings check (Debug, ASan + UBSan, g++)"
cmake --preset host >/dev/null
cmake --build --preset host-gcc -j "$jobs"
ctest --preset host-gcc -j "$jobs" --timeout 900
phase "host-gcc (g++: the libtorch adapter, o3_paths)"

echo "== python: the trickle package built against Debian's PyTorch; its tests and example under torchrun (4 ranks, Gloo)"
MAX_JOBS=$jobs bash tests/python/run.sh
phase "python (Debian torch)"

if [ -n "${TRICKLE_PYPI:-}" ]; then
    echo "== python (PyPI torch): the package against a current PyPI torch, its tests; the CUDA build of the package, comm::process_group_cuda against its CUDA headers"
    MAX_JOBS=$jobs bash scripts/pypi_torch.sh
    phase "python (PyPI torch)"
else
    echo "== python (PyPI torch): not run (TRICKLE_PYPI=1 adds it, or scripts/pypi_torch.sh alone; the CUDA phase compiles the package's nvcc units)"
fi

echo "== host-tsan: the threaded communicator and the algorithms under ThreadSanitizer"
cmake --preset host-tsan >/dev/null
cmake --build --preset host-tsan -j "$jobs"
ctest --preset host-tsan -j "$jobs" --timeout 900
phase "host-tsan"

nvcc=$(trickle_find_nvcc || true)
if [ -n "$nvcc" ] && [ -z "${TRICKLE_NO_CUDA:-}" ]; then
    echo "== cuda: configure, build (sm_80, sm_90), test ($nvcc)"
    trickle_install_cuda_tools # cuobjdump + nvdisasm for the static SASS check (check_sass)
    cmake --preset cuda -DCMAKE_CUDA_COMPILER="$nvcc" -DTRICKLE_BUILD_BENCHMARKS=ON >/dev/null
    cmake --build --preset cuda -j "$jobs" --target trickle_cuda_checks
    ctest --preset cuda -j "$jobs" --timeout 900 -L cuda
    phase "cuda (build, compile checks, tests)"
else
    echo "== cuda: skipped (no nvcc found; set up the CUDA toolkit to build the CUDA targets)"
fi
printf '== phase times: %s\n' "${phases[@]}"
echo "== all tests done in $(( $(date +%s) - start )) s"
