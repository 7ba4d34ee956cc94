#!/usr/bin/env bash
# scripts/gpu_call.sh: the one command a session runs on a lent GPU machine, after
# scripts/gpu_bundle.sh made build/gpu.tar.xz here (carry that file, nothing else):
#
#   GPU_BUNDLE_BEFORE=95590b5 TRICKLE_PY_SITE=build/torch211/lib/python3.12/site-packages scripts/gpu_bundle.sh
#   (device) scripts/gpu_call.sh "$OUT"          with carry = [build/gpu.tar.xz]
#
# It runs scripts/gpu_check.sh in its quick mode with every stage on: the CUDA tests,
# compute-sanitizer's memcheck, the Python package on the GPU (tests/python/test_cuda.py
# over Gloo and NCCL, bench_sparta_step.py at 126M parameters with its launch and
# synchronization counts), the headline benchmark cases before and after, and Nsight
# Compute on the kernels that miss their targets. The device tool brings back at most 8
# files, so everything is packed into OUT/gpu_check.tgz; OUT/summary.md and
# OUT/gpu_check.log come back as they are, to read at once. Stages have their own limits
# (gpu_check.sh); the whole is meant to end within about 7 minutes on one H200.
set -uo pipefail
out=${1:?usage: $0 OUTDIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
mkdir -p "$out"
# Pack whatever exists even when the call is stopped at its time limit (SIGTERM).
pack() {
    tar -C "$work" -czf "$out/gpu_check.tgz" gpu_check 2> /dev/null
    cp "$work/gpu_check/summary.md" "$work/gpu_check/gpu_check.log" "$out/" 2> /dev/null
}
trap 'pack; exit 124' TERM INT
GPU_CHECK_QUICK=1 GPU_CHECK_TORCH=${GPU_CHECK_TORCH:-1} GPU_CHECK_SANITIZE=${GPU_CHECK_SANITIZE:-1} \
    GPU_CHECK_NCU=${GPU_CHECK_NCU:-1} GPU_CHECK_BENCH_UNTIL=${GPU_CHECK_BENCH_UNTIL:-150} \
    bash "$root/scripts/gpu_check.sh" "$work/gpu_check"
rc=$?
pack
cat "$work/gpu_check/summary.md" 2> /dev/null
exit $rc
