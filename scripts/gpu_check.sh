#!/usr/bin/env bash
# scripts/gpu_check.sh: everything that needs a GPU, in one call of under 8 minutes on one H100/H200.
#
#   scripts/gpu_check.sh OUTDIR
#
# 1. Records the GPU (nvidia-smi) in OUTDIR/machine.txt.
# 2. Uses the CUDA build in BUILD_DIR (default build/cuda, made by `cmake --preset cuda`
#    and `cmake --build --preset cuda --target trickle_cuda_checks` on a machine without a
#    GPU and carried here), or builds it when nvcc and cmake are present and it is missing.
# 3. Runs every CUDA test (ctest -L cuda): the kernel bodies against the host, comm::nccl,
#    comm::local_cuda, N workers on one GPU giving exactly the host's replicas for every
#    sampler, both topologies, DiLoCo and SPARTA + DiLoCo (test_device_sparta, test_device_diloco), a SPARTA step
#    captured in a CUDA graph and replayed, the g++ trainer linked against one nvcc
#    instantiation file (test_gxx_trainer), and the static SASS check.
# 4. Runs the CUDA benchmark suite at three sizes (L2-resident, 4x L2, HBM) through
#    scripts/bench_cuda.sh, with the build above.
# 5. Writes OUTDIR/summary.md: the GPU, the test verdicts, and the benchmark tables.
# Each stage has its own time limit so that a hang cannot eat the GPU time of the session;
# the script goes on to the next stage and says what failed. Exit status: 0 when every
# test passed, 1 otherwise.
set -uo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
build=${BUILD_DIR:-$root/build/cuda}
start=$(date +%s)
status=0
log() { echo "[gpu_check $(( $(date +%s) - start ))s] $*" | tee -a "$out/gpu_check.log"; }

if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then
    log "no NVIDIA GPU visible (nvidia-smi -L failed): run this on a GPU machine"
    exit 77
fi
{
    echo "# date"; date -u
    echo "# nvidia-smi -L"; nvidia-smi -L
    echo "# nvidia-smi"; nvidia-smi
    echo "# driver / CUDA"; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
    echo "# git"; git -C "$root" rev-parse HEAD 2> /dev/null || true
} > "$out/machine.txt" 2>&1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
log "GPU: $gpu"

# 2. The build.
if [[ ! -x "$build/tests/cuda/test_device_sparta" ]]; then
    if command -v cmake > /dev/null && { command -v nvcc > /dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; }; then
        log "no CUDA build in $build: building it (sm_90 only, to save time)"
        timeout 300 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTRICKLE_ENABLE_CUDA=ON \
            -DCMAKE_CUDA_ARCHITECTURES=90 -DTRICKLE_BUILD_BENCHMARKS=ON > "$out/build.log" 2>&1 &&
            timeout 300 cmake --build "$build" --target trickle_cuda_checks -j "$(nproc)" >> "$out/build.log" 2>&1 ||
            { log "build failed: see build.log"; status=1; }
    else
        log "no CUDA build in $build and no cmake/nvcc here: build it on the development machine and carry it"
        exit 1
    fi
fi

# 3. Every CUDA test.
log "ctest -L cuda"
if command -v ctest > /dev/null; then
    timeout 240 ctest --test-dir "$build" -L cuda --output-on-failure --timeout 200 > "$out/ctest.txt" 2>&1 || status=1
else
    # No ctest on this machine: run the test binaries themselves.
    : > "$out/ctest.txt"
    for t in "$build"/tests/cuda/test_*; do
        [[ -x "$t" && -f "$t" ]] || continue
        echo "== $t" >> "$out/ctest.txt"
        timeout 200 "$t" >> "$out/ctest.txt" 2>&1 || { rc=$?; [[ $rc == 77 ]] || status=1; echo "exit $rc" >> "$out/ctest.txt"; }
    done
fi
tail -25 "$out/ctest.txt" | tee -a "$out/gpu_check.log"

# 4. Benchmarks at three sizes.
bench="$build/benchmarks/bench_cuda"
if [[ -x "$bench" ]]; then
    log "bench_cuda: the L2, DRAM (4x L2) and HBM groups"
    timeout 200 "$bench" --benchmark_filter='/(L2|DRAM|HBM)$' --benchmark_repetitions=3 --benchmark_min_time=0.05 \
        --benchmark_display_aggregates_only=true --benchmark_out="$out/bench_cuda.json" --benchmark_out_format=json \
        > "$out/bench_cuda.console" 2>&1 || log "bench_cuda stopped early (see bench_cuda.console)"
else
    log "no $bench: benchmarks skipped"
fi

# 5. Summary.
{
    echo "# trickle GPU check"
    echo
    echo "- GPU: $gpu"
    echo "- commit: $(git -C "$root" rev-parse --short HEAD 2> /dev/null || echo unknown)"
    echo "- time: $(( $(date +%s) - start )) s"
    echo
    echo "## Tests"
    echo
    echo '```'
    grep -E "tests passed|tests failed|Passed|Failed|Skipped|\*\*\*" "$out/ctest.txt" | tail -40
    echo '```'
    if [[ -s "$out/bench_cuda.json" ]] && command -v python3 > /dev/null; then
        echo
        echo "## Benchmarks"
        echo
        python3 "$root/scripts/bench_tables.py" --cuda "$out/bench_cuda.json" 2> /dev/null || echo "(bench_tables.py failed)"
    fi
} > "$out/summary.md"
log "wrote $out/summary.md (status $status)"
exit $status
