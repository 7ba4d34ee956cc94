#!/usr/bin/env bash
# Installs the Debian packages trickle's build, tests and simulator need (sourced by
# scripts/test.sh and scripts/run.sh). As root it runs apt-get; otherwise it names what
# is missing and stops.

# package -> a file that proves it is installed
trickle_required_packages() {
    cat <<'LIST'
cmake /usr/bin/cmake
g++ /usr/bin/g++
make /usr/bin/make
doctest-dev /usr/include/doctest/doctest.h
libbenchmark-dev /usr/include/benchmark/benchmark.h
librandom123-dev /usr/include/Random123/philox.h
libopenmpi-dev /usr/include/x86_64-linux-gnu/openmpi/mpi.h|/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h
openmpi-bin /usr/bin/mpirun
libopenblas-dev /usr/include/x86_64-linux-gnu/cblas.h|/usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h|/usr/include/cblas.h
python3-matplotlib /usr/lib/python3/dist-packages/matplotlib/__init__.py
LIST
}

trickle_install_deps() {
    local missing=()
    while read -r pkg files; do
        local found=0
        IFS='|' read -ra alts <<<"$files"
        for f in "${alts[@]}"; do [ -e "$f" ] && found=1; done
        [ "$found" = 1 ] || missing+=("$pkg")
    done < <(trickle_required_packages)
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
