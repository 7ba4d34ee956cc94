#!/usr/bin/env bash
# scripts/gpu_check.sh: everything that needs a GPU, in one call of under 10 minutes on one H100/H200
# (about 8 without the Python stage, GPU_CHECK_TORCH=0).
#
#   scripts/gpu_check.sh OUTDIR
#   GPU_CHECK_QUICK=1 scripts/gpu_check.sh OUTDIR      the quick mode, for a short lease
#   GPU_CHECK_QUICK=1 GPU_CHECK_DRY_RUN=1 scripts/gpu_check.sh OUTDIR
#                                                     its dry run, on a machine without a GPU
#
# The quick mode (GPU_CHECK_QUICK=1) runs every CUDA test (60 s each at most), no Python
# stage (GPU_CHECK_TORCH=1 adds it) and, instead of the whole suite, the headline cases of
# the device path: SPARTA gather and scatter (block256), the fused pair (block256, block32,
# block4096, uniform, permutation, layerwise) at p = 0.5%, 1% and 5% on the L2 and HBM
# groups, and the device codecs (bf16, int8_block64, sign2_block64), one repetition each
# with a bounded timing loop (--benchmark_min_time=0.002, below). bench_cuda times each
# iteration as a batch of calls lasting about 1 ms (CUDA events) but reports the time per
# call, so Google Benchmark's min_time counts call time: min_time m runs about m / t_call
# batches, m * 1 ms / t_call of wall time. At the full suite's old 0.05 s a 5 us case ran
# 10,000 batches (10 s, times 3 repetitions: why the first H200 run covered 29 cases in
# 390 s); 0.002 s runs 400 (0.4 s), still over 40,000 calls. Where the bundle holds an earlier build's benchmark
# ($BUILD_DIR/before/bench_cuda: GPU_BUNDLE_BEFORE=<rev> GPU_BUNDLE_PYTHON=0
# scripts/gpu_bundle.sh, 54 MB with the 2026-11-30 build's, carried as build/gpu), it runs
# the same cases with that one, and OUTDIR/table.md is the headline table before and after,
# each as % of the B_copy its own run measured (scripts/bench_tables.py --headline). The
# whole quick check is meant to take under 4 minutes of GPU time on one H100/H200; that is
# a target, not yet a measurement.
#
# The dry run (GPU_CHECK_DRY_RUN=1) needs no GPU: it lists the tests and benchmark
# commands it would run, and renders table.md from recorded JSON (GPU_CHECK_DRY_JSON,
# GPU_CHECK_DRY_BEFORE_JSON: space-separated files), so the script and the table are
# checked on every CI run (the ctest gpu_check_dry_run).
#
# 1. Records the GPU (nvidia-smi) in OUTDIR/machine.txt.
# 2. Uses the CUDA binaries in BUILD_DIR (default build/gpu, which scripts/gpu_bundle.sh
#    makes from the cuda preset's build on a machine without a GPU, small enough to carry
#    to the GPU machine; else build/cuda), or builds them when nvcc and cmake are present
#    and they are missing.
# 3. Runs every CUDA test (ctest -L cuda): the kernel bodies against the host, comm::nccl,
#    comm::local_cuda, N workers on one GPU giving exactly the host's replicas for every
#    sampler, both topologies, DiLoCo and SPARTA + DiLoCo (test_device_sparta, test_device_diloco), a SPARTA step
#    captured in a CUDA graph and replayed, the g++ trainer linked against one nvcc
#    instantiation file (test_gxx_trainer), and the static SASS check.
# 3c. Runs the Python package's CUDA tests and its step-time benchmark (see 3c below).
# 4. Runs the CUDA benchmark suite at three sizes (L2-resident, 4x L2, HBM) through
#    scripts/bench_cuda.sh, with the build above.
# 4b. With GPU_CHECK_NCU=1, profiles the headline kernels with Nsight Compute (ncu.txt).
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
build=${BUILD_DIR:-}
# A bundle carried as one archive (scripts/gpu_bundle.sh writes build/gpu.tar.xz beside
# build/gpu: the binaries compress about 3x, which keeps the tests, the earlier build's
# benchmark and the Python package together under the 64 MiB carry limit).
if [[ -z "$build" && ! -d "$root/build/gpu" && -f "$root/build/gpu.tar.xz" ]]; then
    tar -xJf "$root/build/gpu.tar.xz" -C "$root/build" || { echo "$0: cannot unpack build/gpu.tar.xz" >&2; exit 1; }
fi
if [[ -z "$build" ]]; then
    build=$root/build/gpu # made by scripts/gpu_bundle.sh: the binaries alone, small enough to carry
    [[ -d "$build" ]] || build=$root/build/cuda
fi
start=$(date +%s)
status=0
# Limits (seconds), overridable for a short first look: each test, when tests stop
# starting, and when the benchmarks must end.
quick=${GPU_CHECK_QUICK:-0}
dry=${GPU_CHECK_DRY_RUN:-0}
if [[ "$quick" == 1 ]]; then
    test_limit=${GPU_CHECK_TEST_TIMEOUT:-60}
    tests_until=${GPU_CHECK_TESTS_UNTIL:-120}
    bench_until=${GPU_CHECK_BENCH_UNTIL:-230}
    torch_default=0
else
    test_limit=${GPU_CHECK_TEST_TIMEOUT:-200}
    tests_until=${GPU_CHECK_TESTS_UNTIL:-300}
    bench_until=${GPU_CHECK_BENCH_UNTIL:-450}
    torch_default=1
fi
# The quick mode's benchmark cases (Google Benchmark's --benchmark_filter).
headline_filter='^copy/|^exchange/(gather|scatter)/block256/fp32/p0\.(005|01|05)/(L2|HBM)/|^exchange/fused/(block32|block256|block4096|uniform|permutation|layerwise)/fp32/p0\.(005|01|05)/(L2|HBM)/|^codec/(encode|decode)/(bf16|int8_block64|sign2_block64)/'
# Runs a command, or in a dry run says what it would run.
run_or_say() { if [[ "$dry" == 1 ]]; then log "DRY RUN: would run: $*"; else "$@"; fi; }
log() { echo "[gpu_check $(( $(date +%s) - start ))s] $*" | tee -a "$out/gpu_check.log"; }

if [[ "$dry" == 1 ]]; then
    log "DRY RUN (GPU_CHECK_DRY_RUN=1): nothing runs on a GPU; quick mode: $quick"
    { echo "# dry run on $(hostname), $(date -u)"; git -C "$root" rev-parse HEAD 2> /dev/null || true; } > "$out/machine.txt"
    gpu="(dry run: no GPU)"
elif ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then
    log "no NVIDIA GPU visible (nvidia-smi -L failed): run this on a GPU machine"
    exit 77
fi
[[ "$dry" == 1 ]] || {
    echo "# date"; date -u
    echo "# nvidia-smi -L"; nvidia-smi -L
    echo "# nvidia-smi"; nvidia-smi
    echo "# driver / CUDA"; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
    echo "# git"; git -C "$root" rev-parse HEAD 2> /dev/null || true
} > "$out/machine.txt" 2>&1
[[ "$dry" == 1 ]] || gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
log "GPU: $gpu"

# 2. The build.
if [[ "$dry" == 1 ]]; then
    [[ -d "$build" ]] || log "DRY RUN: no build in $build: the test list below is empty"
elif [[ ! -x "$build/tests/cuda/test_device_sparta" ]]; then
    build=$root/build/cuda
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

# The carried runtime libraries, and NCCL wherever this machine keeps it.
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The Python wheel's NCCL first: a machine's system NCCL may be older than the one trickle
# was built against (an H200 machine had Debian's 2.28.3, without ncclCommRevoke, beside
# the wheel's 2.28.9).
{
    nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2> /dev/null || true)
    [[ -n "$nccl_dir" && -d "$nccl_dir" ]] && export LD_LIBRARY_PATH="$nccl_dir:$LD_LIBRARY_PATH"
    if [[ -z "$nccl_dir" ]]; then # another wheel layout (nvidia/cu13/lib, say): look for the library itself
        site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2> /dev/null || true)
        lib=$(find $site -name 'libnccl.so.2' 2> /dev/null | head -1)
        [[ -n "$lib" ]] && export LD_LIBRARY_PATH="$(dirname "$lib"):$LD_LIBRARY_PATH"
    fi
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [[ -d $d ]] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; done
}
log "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

# 3. Every CUDA test: the binaries themselves (ctest files hold the build machine's paths,
#    which a carried build does not keep).
log "CUDA tests"
: > "$out/ctest.txt"
passed=0 failed=0 skipped=0
# (The CUDA tests of other areas, such as tests/codec's test_codec_cuda, are in the bundle's
# tests/cuda; in a build tree they stay in their own folder.)
for t in "$build"/tests/cuda/test_* "$build"/tests/codec/test_codec_cuda "$build"/examples/04_gpu_workers/gpu_workers; do
    [[ -x "$t" && -f "$t" ]] || continue
    name=$(basename "$t")
    # The whole check stays under 8 minutes: tests left after 5 are reported, not run.
    if (( $(date +%s) - start > tests_until )); then
        echo "$name: NOT RUN (time budget spent)" >> "$out/ctest.txt"
        failed=$((failed + 1)); status=1
        continue
    fi
    if [[ "$dry" == 1 ]]; then
        echo "$name: DRY RUN (would run with a $test_limit s limit)" >> "$out/ctest.txt"
        continue
    fi
    echo "== $name" >> "$out/ctest.txt"
    t0=$(date +%s)
    timeout "$test_limit" "$t" >> "$out/ctest.txt" 2>&1
    rc=$?
    log "$name: exit $rc in $(( $(date +%s) - t0 )) s"
    case $rc in
        0) passed=$((passed + 1)); echo "$name: passed" >> "$out/ctest.txt" ;;
        77) skipped=$((skipped + 1)); echo "$name: skipped" >> "$out/ctest.txt" ;;
        *) failed=$((failed + 1)); status=1; echo "$name: FAILED (exit $rc)" >> "$out/ctest.txt" ;;
    esac
done
echo "$passed passed, $failed failed, $skipped skipped" | tee -a "$out/ctest.txt" "$out/gpu_check.log"
if (( passed == 0 )) && [[ "$dry" != 1 ]]; then
    # nvidia-smi sees a GPU but every binary skipped: the CUDA runtime found none (a driver
    # too old for the carried runtime, say). That is a failed check, not a pass.
    log "no CUDA test ran although nvidia-smi sees a GPU: see ctest.txt"
    status=1
fi

# 3b. With GPU_CHECK_SANITIZE=1, the device tests again under compute-sanitizer's memcheck
#     (out-of-bounds and misaligned accesses, leaks), where the machine has the tool.
if [[ "${GPU_CHECK_SANITIZE:-0}" == 1 && "$dry" != 1 ]]; then
    san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null || true)
    if [[ -n "$san" ]]; then
        for name in test_device_sparta test_device_diloco test_device_codec test_local_cuda; do
            t="$build/tests/cuda/$name"
            [[ -x "$t" ]] || continue
            t0=$(date +%s)
            echo "== $name" >> "$out/memcheck.txt"
            timeout 60 "$san" --tool memcheck --leak-check full --error-exitcode 9 "$t" > "$out/memcheck.part" 2>&1
            rc=$?
            log "memcheck $name: exit $rc in $(( $(date +%s) - t0 )) s ($(grep -c 'Invalid\|Leaked' "$out/memcheck.part") reports)"
            cat "$out/memcheck.part" >> "$out/memcheck.txt"
            rm -f "$out/memcheck.part"
            (( rc != 0 )) && status=1
        done
    else
        log "no compute-sanitizer on this machine: memcheck skipped"
    fi
fi

# 3c. The Python package on CUDA tensors (GPU_CHECK_TORCH=0 skips it): tests/python/test_cuda.py
#     under torchrun, 4 ranks sharing the GPU over Gloo and 1 rank over NCCL (bits against
#     the CPU path, bytes, a state_dict round trip, a mismatched model, the current stream),
#     the NCCL run again under compute-sanitizer, and benchmarks/pytorch/bench_sparta_step.py
#     at GPT-2 small's size (126M parameters, AdamW). Needs a Python with a CUDA build of torch
#     ($GPU_CHECK_PYTHON, default python3) that imports trickle: installed there, or the CUDA
#     build that scripts/gpu_bundle.sh carries in $build/python (built against the same torch).
torch_status="not run"
if [[ "${GPU_CHECK_TORCH:-$torch_default}" != 0 && "$dry" != 1 ]]; then
    py=${GPU_CHECK_PYTHON:-python3}
    [[ -d "$build/python/trickle" ]] && export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
    why=$("$py" -c 'import torch, trickle
assert torch.cuda.is_available(), "torch sees no GPU"
assert trickle.build_info()["cuda"], "trickle was built without CUDA"
print("ok")' 2>&1 | tail -1)
    if [[ "$why" != ok ]]; then
        torch_status="skipped: $why"
        log "python on CUDA: $torch_status"
    else
        torch_status="passed"
        run_py() { # name, limit, command...
            local name=$1 limit=$2; shift 2
            local t0=$(date +%s)
            echo "== $name" >> "$out/python_cuda.txt"
            timeout "$limit" "$@" >> "$out/python_cuda.txt" 2>&1
            local rc=$?
            log "python on CUDA: $name: exit $rc in $(( $(date +%s) - t0 )) s"
            if (( rc != 0 )); then torch_status="FAILED ($name)"; status=1; fi
        }
        trun=("$py" -m torch.distributed.run --standalone)
        run_py "test_cuda, 4 ranks on one GPU over Gloo" 150 "${trun[@]}" --nproc_per_node 4 "$root/tests/python/test_cuda.py"
        TRICKLE_TEST_BACKEND=nccl run_py "test_cuda, 1 rank over NCCL" 90 "${trun[@]}" --nproc_per_node 1 "$root/tests/python/test_cuda.py"
        san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null || true)
        if [[ -n "$san" ]]; then
            # --report-api-errors no: NCCL probes its kernels at init and gets (and handles)
            # cudaErrorNoKernelImageForDevice for the ones it lacks, which memcheck would
            # report as 8 errors (the 2026-12-04 run); memory errors are still reported.
            TRICKLE_TEST_BACKEND=nccl TRICKLE_TEST_ONLY=matches_cpu run_py "test_cuda under compute-sanitizer memcheck (1 rank, NCCL)" 90 \
                "$san" --tool memcheck --report-api-errors no --target-processes all --error-exitcode 9 "${trun[@]}" --nproc_per_node 1 "$root/tests/python/test_cuda.py"
        fi
        run_py "bench_sparta_step, 126M parameters, 1 rank over NCCL" 90 "${trun[@]}" --nproc_per_node 1 \
            "$root/benchmarks/pytorch/bench_sparta_step.py" --device cuda --backend nccl --hidden 2048 --layers 30 \
            --diloco --profile --iters 10 --json "$out/bench_pytorch_nccl.json"
        [[ "$quick" == 1 ]] || run_py "bench_sparta_step, 126M parameters, 4 ranks on one GPU over Gloo" 90 "${trun[@]}" --nproc_per_node 4 \
            "$root/benchmarks/pytorch/bench_sparta_step.py" --device cuda --backend gloo --hidden 2048 --layers 30 \
            --iters 5 --json "$out/bench_pytorch_gloo.json"
    fi
fi

# 4. Benchmarks: the headline cases (quick mode), after and, with an earlier build in the
#    bundle, before; else the suite at three sizes.
bench="$build/benchmarks/bench_cuda"
before_bench="$build/before/bench_cuda"
after_json=() before_json=()
if [[ "$quick" == 1 ]]; then
    quick_args=(--benchmark_filter="$headline_filter" --benchmark_repetitions=1 --benchmark_min_time=0.002)
    # The stage's budget (GPU_CHECK_BENCH_UNTIL, from when the stage begins in the quick
    # mode, since the Python stage before it may or may not run) is shared by the two
    # builds: the first may take half of it, the second what is left.
    bench_t0=$(date +%s)
    share=2
    for which in after before; do
        if [[ $which == after ]]; then b=$bench; else b=$before_bench; fi
        if [[ "$dry" != 1 && ! -x "$b" ]]; then
            log "no $b: the $which column is left out"
            share=1
            continue
        fi
        left=$(( (bench_until - ($(date +%s) - bench_t0)) / share ))
        share=1
        (( left < 30 )) && left=30
        log "bench_cuda ($which): the headline cases, at most $left s"
        run_or_say timeout "$left" "$b" "${quick_args[@]}" --benchmark_out="$out/bench_$which.json" \
            --benchmark_out_format=json > "$out/bench_$which.console" 2>&1 ||
            log "bench_cuda ($which) stopped early (see bench_$which.console)"
        [[ -s "$out/bench_$which.json" ]] && { [[ $which == after ]] && after_json+=("$out/bench_$which.json") || before_json+=("$out/bench_$which.json"); }
    done
    if [[ "$dry" == 1 ]]; then
        read -r -a after_json <<< "${GPU_CHECK_DRY_JSON:-}"
        read -r -a before_json <<< "${GPU_CHECK_DRY_BEFORE_JSON:-}"
    fi
    if (( ${#after_json[@]} > 0 )); then
        args=(--headline "${after_json[@]}")
        (( ${#before_json[@]} > 0 )) && args+=(--before "${before_json[@]}")
        python3 "$root/scripts/bench_tables.py" "${args[@]}" > "$out/table.md" 2> "$out/table.err" ||
            { log "bench_tables.py --headline failed: see table.err"; status=1; }
        log "wrote $out/table.md"
    fi
elif [[ -x "$bench" && "$dry" != 1 ]]; then
    log "bench_cuda: the L2, DRAM (4x L2) and HBM groups, and the device codec passes"
    left=$(( bench_until - ($(date +%s) - start) ))
    (( left < 30 )) && left=30
    timeout "$left" "$bench" --benchmark_filter='^copy/|/(L2|DRAM|HBM)(/manual_time)?$|^codec/' --benchmark_repetitions=3 --benchmark_min_time=0.005 \
        --benchmark_display_aggregates_only=true --benchmark_out="$out/bench_cuda.json" --benchmark_out_format=json \
        > "$out/bench_cuda.console" 2>&1 || log "bench_cuda stopped early (see bench_cuda.console)"
else
    log "no $bench: benchmarks skipped"
fi

# 4b. With GPU_CHECK_NCU=1, Nsight Compute's sections for the headline kernels that miss
#     their targets (one or two launches of each, --clock-control none), into ncu.txt: the
#     achieved bandwidth, occupancy, warp stalls and launch shape say why a kernel misses.
ncu_cases=(
    '^exchange/gather/block256/fp32/p0\.01/HBM/'
    '^exchange/scatter/block256/fp32/p0\.01/HBM/'
    '^exchange/fused/uniform/fp32/p0\.01/HBM/'
    '^codec/encode/bf16/'
    '^codec/encode/int8_block64/'
    '^codec/decode/int8_block64/'
)
if [[ "${GPU_CHECK_NCU:-0}" == 1 ]]; then
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1 || true)
    if [[ -z "$ncu" ]]; then
        log "no ncu on this machine: the profile is skipped"
    elif [[ -x "$bench" ]]; then
        for f in "${ncu_cases[@]}"; do
            log "ncu: $f"
            run_or_say timeout 60 "$ncu" --clock-control none --kernel-name-base demangled --kernel-name regex:trickle \
                --launch-skip 3 --launch-count 2 --section SpeedOfLight --section MemoryWorkloadAnalysis \
                --section Occupancy --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis \
                "$bench" --benchmark_filter="$f" --benchmark_min_time=0.002 --benchmark_repetitions=1 \
                >> "$out/ncu.txt" 2>&1 || log "ncu: $f stopped early"
        done
    fi
fi

# 5. Summary.
{
    echo "# trickle GPU check"
    echo
    echo "- GPU: $gpu"
    echo "- commit: $(git -C "$root" rev-parse --short HEAD 2> /dev/null || echo unknown)"
    echo "- time: $(( $(date +%s) - start )) s"
    [[ -f "$build/before/commit" ]] && echo "- before (the headline table's first column): $(cat "$build/before/commit")"
    [[ "$quick" == 1 ]] && echo "- mode: quick (GPU_CHECK_QUICK=1)"
    echo
    echo "## Tests"
    echo
    echo '```'
    grep -E ": (passed|FAILED|skipped|NOT RUN|DRY RUN)|passed, .* failed" "$out/ctest.txt" | tail -40
    echo '```'
    echo
    echo "## The Python package on CUDA tensors: $torch_status"
    if [[ -s "$out/python_cuda.txt" ]]; then
        echo
        echo '```'
        grep -E "^== |  (ok|FAIL) |test_cuda|collectives per|parameters, p =|^[a-zA-Z.()-].*[0-9]\.[0-9]{3}$" "$out/python_cuda.txt" | head -80
        echo '```'
    fi
    if [[ -s "$out/table.md" ]]; then
        echo
        echo "## The headline cases (quick mode)"
        echo
        cat "$out/table.md"
    fi
    if [[ -s "$out/bench_cuda.json" ]] && command -v python3 > /dev/null; then
        echo
        echo "## Benchmarks"
        echo
        python3 "$root/scripts/bench_tables.py" --cuda "$out/bench_cuda.json" 2> /dev/null || echo "(bench_tables.py failed)"
    fi
} > "$out/summary.md"
log "wrote $out/summary.md (status $status)"
exit $status
