#!/usr/bin/env bash
# scripts/bench_cuda.sh: on a GPU machine, configures, builds and runs the CUDA benchmark suite, writing JSON to OUTDIR.
#
#   scripts/bench_cuda.sh OUTDIR [SIZE ...] [google-benchmark flags...]
#
# SIZE is a group of benchmarks/cases.hpp (L2, LLC, DRAM, HBM; also comma-separated, e.g.
# L2,LLC,DRAM): each size named runs as its own pass of bench_cuda, restricted to the cases
# of that group (the copy cases run with the first), and writes
# OUTDIR/bench_cuda-SIZE.json and .console, so a run cut short keeps the sizes it finished.
# The passes are then merged into OUTDIR/bench_cuda.json (Google Benchmark JSON, the first
# pass's context; tables: scripts/bench_tables.py). Without a SIZE, one pass runs every
# case into OUTDIR/bench_cuda.json and OUTDIR/bench_cuda.console. Either way
# OUTDIR/machine.txt records nvidia-smi, nvcc and the CPU. Extra flags go to bench_cuda
# after the defaults, so they win, e.g.
#   scripts/bench_cuda.sh out L2 LLC DRAM --benchmark_repetitions=1
#   scripts/bench_cuda.sh out --benchmark_filter='^exchange/fused/block' --benchmark_repetitions=1
# (a --benchmark_filter of your own replaces the SIZE filter of every pass).
# Environment: BUILD_DIR (default build-bench-cuda), CUDA_ARCHS (default "80;90"),
# JOBS (default: all cores).
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 OUTDIR [SIZE ...] [google-benchmark flags...]   (SIZE: L2, LLC, DRAM, HBM)" >&2
    exit 2
fi
out=$1
shift
sizes=()
while [[ $# -gt 0 && $1 != -* ]]; do
    IFS=',' read -ra words <<< "$1"
    for s in "${words[@]}"; do
        case "$s" in
            L2 | LLC | DRAM | HBM) sizes+=("$s") ;;
            "") ;;
            *) echo "$0: unknown size '$s' (the groups are L2, LLC, DRAM, HBM)" >&2; exit 2 ;;
        esac
    done
    shift
done
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

# NCCL is used where it is found: the launch timeline then steps over comm::nccl (one rank).
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTRICKLE_BUILD_BENCHMARKS=ON \
    -DTRICKLE_BUILD_TESTS=OFF -DTRICKLE_BUILD_EXAMPLES=OFF -DTRICKLE_ENABLE_CUDA=ON \
    -DTRICKLE_ENABLE_MPI=OFF -DTRICKLE_ENABLE_NCCL=AUTO "-DCMAKE_CUDA_ARCHITECTURES=$archs"
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
# min_time counts the time per call while an iteration is a batch of about 1 ms (see
# scripts/gpu_check.sh): 0.01 s is about 0.01 / t_call batches, 2 s of wall time for a
# 5 us case (it was 0.1: 20 s, for each of the three repetitions).
run_pass() { # run_pass NAME [flags...]
    local name=$1
    shift
    "$build/benchmarks/bench_cuda" \
        --benchmark_repetitions=3 --benchmark_min_time=0.01 --benchmark_display_aggregates_only=true \
        --benchmark_out="$out/$name.json" --benchmark_out_format=json \
        "$@" | tee "$out/$name.console"
}

if [[ ${#sizes[@]} -eq 0 ]]; then
    run_pass bench_cuda "$@"
else
    files=()
    first=1
    for s in "${sizes[@]}"; do
        filter="/$s(/manual_time)?\$"
        [[ $first -eq 1 ]] && filter="^copy/|$filter"
        first=0
        echo "== bench_cuda: group $s"
        run_pass "bench_cuda-$s" "--benchmark_filter=$filter" "$@"
        files+=("$out/bench_cuda-$s.json")
    done
    python3 - "$out/bench_cuda.json" "${files[@]}" << 'EOF'
import json, sys
merged = None
for path in sys.argv[2:]:
    with open(path) as f:
        doc = json.load(f)
    if merged is None:
        merged = doc
    else:
        merged["benchmarks"].extend(doc.get("benchmarks", []))
with open(sys.argv[1], "w") as f:
    json.dump(merged, f, indent=2)
print("merged %d passes into %s" % (len(sys.argv) - 2, sys.argv[1]))
EOF
fi

echo "wrote $out/bench_cuda.json; tables: python3 $root/scripts/bench_tables.py --cuda $out/bench_cuda.json"
