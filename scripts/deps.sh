#!/usr/bin/env bash
# Installs the Debian packages trickle's build, tests and simulator need (sourced by
# scripts/test.sh and scripts/run.sh). As root it runs apt-get; otherwise it names what
# is missing and stops.
#
#   trickle_install_deps sim   what scripts/run.sh needs: configuring the host-release preset
#                              and building trickle-sim (a C++20 compiler, CMake, make, doctest,
#                              which the preset's tests/ directory requires at configure time, and
#                              OpenBLAS for the simulator's matrix products)
#   trickle_install_deps all   (the default) the above, and what scripts/test.sh adds: MPI,
#                              Google Benchmark, Random123, libtorch + Gloo (trickle::torch), and
#                              the Python package's build (python3-torch, pybind11, headers,
#                              venv, pip, setuptools, wheel, ninja), matplotlib for the plots, and
#                              clang with its sanitizer runtimes and OpenMP (CI's host build)
#
# Everything beyond the sim set is optional to CMake: MPI, Torch and OpenMP are found QUIET
# (cmake/TrickleComponents.cmake, AUTO by default) and the targets that need them are skipped
# when they are absent; Google Benchmark is required only with TRICKLE_BUILD_BENCHMARKS
# (off in host-release); Random123 only adds a cross-check to test_philox.

# package -> a file that proves it is installed (alternatives separated by |; globs allowed)
trickle_sim_packages() {
    cat <<'LIST'
cmake /usr/bin/cmake
g++ /usr/bin/g++
make /usr/bin/make
doctest-dev /usr/include/doctest/doctest.h
libopenblas-dev /usr/lib/x86_64-linux-gnu/libopenblas.so|/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so
LIST
}

trickle_test_packages() {
    cat <<'LIST'
libbenchmark-dev /usr/include/benchmark/benchmark.h
librandom123-dev /usr/include/Random123/philox.h
libopenmpi-dev /usr/include/x86_64-linux-gnu/openmpi/mpi.h|/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h
openmpi-bin /usr/bin/mpirun
python3-matplotlib /usr/lib/python3/dist-packages/matplotlib/__init__.py
libtorch-dev /usr/include/torch/csrc/api/include/torch/torch.h
libgloo-dev /usr/include/gloo/rendezvous/store.h
python3-torch /usr/lib/python3/dist-packages/torch/__init__.py
python3-dev /usr/include/python3.11/Python.h
pybind11-dev /usr/include/pybind11/pybind11.h
python3-venv /usr/lib/python3.11/ensurepip/__init__.py
python3-pip /usr/lib/python3/dist-packages/pip/__init__.py
python3-wheel /usr/lib/python3/dist-packages/wheel/__init__.py
python3-setuptools /usr/lib/python3/dist-packages/setuptools/__init__.py
ninja-build /usr/bin/ninja
clang /usr/bin/clang++
libclang-rt-dev /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.asan-x86_64.a
libomp-dev /usr/lib/llvm-*/lib/libomp.so
LIST
}

# The packages of a set: sim, or all (sim + test).
trickle_required_packages() {
    case "${1:-all}" in
        sim) trickle_sim_packages ;;
        all) trickle_sim_packages; trickle_test_packages ;;
        *) echo "trickle: unknown package set '$1' (sim or all)" >&2; return 2 ;;
    esac
}

# trickle_install_deps [sim|all]: installs (as root) or names the missing packages of the set.
trickle_install_deps() {
    local set=${1:-all} list
    list=$(trickle_required_packages "$set") || return 2
    local missing=()
    while read -r pkg files; do
        [ -n "$pkg" ] || continue
        local found=0
        IFS='|' read -ra alts <<<"$files"
        for f in "${alts[@]}"; do compgen -G "$f" >/dev/null && found=1; done
        [ "$found" = 1 ] || missing+=("$pkg")
    done <<<"$list"
    if [ "${#missing[@]}" -eq 0 ]; then
        return 0
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "trickle: missing Debian packages: ${missing[*]}" >&2
        echo "trickle: install them as root:  apt-get update && apt-get install -y ${missing[*]}" >&2
        return 1
    fi
    echo "trickle: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || { echo "trickle: apt-get update failed; cannot install ${missing[*]}" >&2; return 1; }
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
        { echo "trickle: apt-get install failed for: ${missing[*]}" >&2; return 1; }
}

# The CUDA toolkit is optional: tests compile CUDA code when nvcc is found.
trickle_find_nvcc() {
    if command -v nvcc >/dev/null 2>&1; then
        command -v nvcc
    elif [ -x /usr/local/cuda/bin/nvcc ]; then
        echo /usr/local/cuda/bin/nvcc
    fi
}

trickle_jobs() {
    local n
    n=$(nproc 2>/dev/null || echo 2)
    echo "$n"
}

# cuobjdump and nvdisasm, which the static SASS check (scripts/check_sass.py, ctest
# check_sass) needs, when nvcc is present but they are not: a CUDA toolkit may ship
# without them, so they come from PyPI (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) into
# build/tools/pypi, where check_sass.py looks (pip --target: no virtual environment, and no
# clash with Debian's externally managed Python). Never fails: when they cannot be
# installed it says what is missing and the check reports itself skipped.
trickle_install_cuda_tools() {
    local root dir nvcc_dir tool found
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    dir="$root/build/tools/pypi"
    nvcc_dir=$(dirname "$(trickle_find_nvcc)" 2>/dev/null || true)
    found=1
    for tool in cuobjdump nvdisasm; do
        if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "$nvcc_dir/$tool" ] &&
            ! compgen -G "$dir/nvidia/*/bin/$tool" >/dev/null; then
            found=0
        fi
    done
    [ "$found" = 1 ] && return 0
    local py
    py=$(command -v python3 || true)
    if [ -n "$py" ] && ! "$py" -m pip --version >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "trickle: installing python3-pip (for cuobjdump and nvdisasm from PyPI)" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip >/dev/null 2>&1 ||
            { apt-get update -qq >/dev/null 2>&1 &&
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip >/dev/null 2>&1; } ||
            true
    fi
    if [ -z "$py" ] || ! "$py" -m pip --version >/dev/null 2>&1; then
        echo "trickle: cuobjdump/nvdisasm missing and no python3 with pip to fetch them; check_sass will be skipped" >&2
        echo "trickle: (apt-get install python3-pip, then: python3 -m pip install --target $dir nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)" >&2
        return 0
    fi
    echo "trickle: installing cuobjdump and nvdisasm from PyPI into $dir" >&2
    if ! "$py" -m pip install --quiet --disable-pip-version-check --no-warn-script-location --root-user-action=ignore --upgrade \
        --target "$dir" 'nvidia-cuda-cuobjdump>=13.2,<14' 'nvidia-cuda-nvdisasm>=13.2,<14' >&2; then
        echo "trickle: pip could not install nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm; check_sass will be skipped" >&2
    fi
    return 0
}
