#!/usr/bin/env bash
# scripts/bench_cuda.sh: on a GPU machine, configures, builds and runs the CUDA benchmark suite, writing JSON to OUTDIR.
#
#   scripts/bench_cuda.sh OUTDIR [google-benchmark flags...]
#
# Writes OUTDIR/bench_cuda.json (Google Benchmark JSON; tables: scripts/bench_tables.py),
# OUTDIR/bench_cuda.console and OUTDIR/machine.txt (nvidia-smi, nvcc, CPU). Extra flags
# go to bench_cuda after the defaults, so they win, e.g.
#   scripts/bench_cuda.sh out --benchmark_filter='/DRAM$' --benchmark_repetitions=1
# Environment: BUILD_DIR (default build-bench-cuda), CUDA_ARCHS (default "80;90"),
# JOBS (default: all cores).
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 OUTDIR [google-benchmark flags...]" >&2
    exit 2
fi
out=$1
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build-bench-cuda}
archs=${CUDA_ARCHS:-80;90}
jobs=${JOBS:-$(nproc)}

if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then
    echo "$0: no NVIDIA GPU visible (nvidia-smi -L failed); run this on a GPU machine" >&2
    exit 77
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTRICKLE_BUILD_BENCHMARKS=ON \
    -DTRICKLE_BUILD_TESTS=OFF -DTRICKLE_BUILD_EXAMPLES=OFF -DTRICKLE_ENABLE_CUDA=ON \
    -DTRICKLE_ENABLE_MPI=OFF -DTRICKLE_ENABLE_NCCL=OFF "-DCMAKE_CUDA_ARCHITECTURES=$archs"
cmake --build "$build" --target bench_cuda -j "$jobs"

{
    echo "# date"; date -u
    echo "# nvidia-smi"; nvidia-smi
    echo "# nvidia-smi -q (clocks, memory)"; nvidia-smi -q -d CLOCK,MEMORY || true
    echo "# nvcc"; "${CUDACXX:-nvcc}" --version 2> /dev/null || /usr/local/cuda/bin/nvcc --version || true
    echo "# cpu"; lscpu | head -20 || true
    echo "# git"; git -C "$root" rev-parse HEAD 2> /dev/null || true
} > "$out/machine.txt"

# Three repetitions of every case; the 234M-element "HBM" cases (0.9 GB in fp32) take a few
# seconds each to set up (positions are counted on the host to get the sector model).
"$build/benchmarks/bench_cuda" \
    --benchmark_repetitions=3 --benchmark_min_time=0.1 --benchmark_display_aggregates_only=true \
    --benchmark_out="$out/bench_cuda.json" --benchmark_out_format=json \
    "$@" | tee "$out/bench_cuda.console"

echo "wrote $out/bench_cuda.json; tables: python3 $root/scripts/bench_tables.py --cuda $out/bench_cuda.json"
