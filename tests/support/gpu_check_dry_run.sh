#!/usr/bin/env bash
# tests/support/gpu_check_dry_run.sh: the quick mode of scripts/gpu_check.sh in a dry run
# (ctest gpu_check_dry_run): no GPU; the headline table rendered from the recorded H200 run
# of 2026-11-30 (docs/measurements/h200-2026-11-30) as both columns. It must list the
# benchmark commands it would run, and the table must hold the figures of that run
# (issue 23's "now" column: gather block256 p = 1% HBM 55%, int8_block64 encode 7%).
#
#   gpu_check_dry_run.sh SOURCE_DIR BUILD_DIR OUTDIR
set -euo pipefail
src=$1 build=$2 out=$3
rec=$src/docs/measurements/h200-2026-11-30
rm -rf "$out"
BUILD_DIR=$build GPU_CHECK_QUICK=1 GPU_CHECK_DRY_RUN=1 \
    GPU_CHECK_DRY_JSON="$rec/bench_cuda_hbm.json $rec/bench_cuda.json" \
    GPU_CHECK_DRY_BEFORE_JSON="$rec/bench_cuda_hbm.json $rec/bench_cuda.json" \
    bash "$src/scripts/gpu_check.sh" "$out"
fail() { echo "gpu_check_dry_run: FAILED: $*"; exit 1; }
grep -q "DRY RUN: would run: timeout [0-9]* $build/benchmarks/bench_cuda --benchmark_filter=" "$out/gpu_check.log" ||
    fail "the log does not name the benchmark command"
grep -q -- "--benchmark_min_time=0.002" "$out/gpu_check.log" || fail "the benchmark command is not bounded"
grep -qF "| SPARTA gather, block256, fp32, p = 1%, HBM | 55% | 55% | 8.82 µs | ≥ 85% of B_copy | **missed** |" "$out/table.md" ||
    fail "table.md lacks the recorded gather figure"
grep -qF "| device codec encode, int8_block64, 16M values | 7% | 7% |" "$out/table.md" || fail "table.md lacks the recorded codec figure"
grep -q "## The headline cases (quick mode)" "$out/summary.md" || fail "summary.md lacks the table"
echo "gpu_check_dry_run: passed ($(grep -c '^| [SPd]' "$out/table.md") rows in table.md)"
