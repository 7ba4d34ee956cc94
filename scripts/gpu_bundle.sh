#!/usr/bin/env bash
# scripts/gpu_bundle.sh: the CUDA test, example and benchmark binaries of build/cuda, copied
# alone into build/gpu (about 25 MB instead of the build tree's 70), for a session that
# carries them to a GPU machine and runs scripts/gpu_check.sh there.
#
#   cmake --preset cuda -DTRICKLE_BUILD_BENCHMARKS=ON && cmake --build --preset cuda --target trickle_cuda_checks
#   scripts/gpu_bundle.sh            # then: run scripts/gpu_check.sh OUT, carrying build/gpu.tar.xz
#                                    # (the bundle as one archive; or build/gpu itself)
#   GPU_BUNDLE_BEFORE=95590b5 GPU_BUNDLE_PYTHON=0 scripts/gpu_bundle.sh   (for the quick check)
#       also builds bench_cuda at that commit (a git worktree in build/before-src, sm_90
#       only, Release, no tests) into build/gpu/before/bench_cuda, for the quick mode's
#       before-and-after table (GPU_CHECK_QUICK=1 scripts/gpu_check.sh); 95590b5 is the
#       build of the first H200 run (2026-11-30). A few minutes of nvcc on two cores.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src=${1:-$root/build/cuda}
dst=$root/build/gpu
[[ -x "$src/tests/cuda/test_device_sparta" ]] || { echo "$0: no CUDA build in $src (see the usage above)" >&2; exit 1; }
rm -rf "$dst"
mkdir -p "$dst/tests/cuda" "$dst/examples/04_gpu_workers" "$dst/benchmarks"
for t in "$src"/tests/cuda/test_* "$src"/tests/codec/test_codec_cuda; do
    [[ -x "$t" && -f "$t" ]] && cp "$t" "$dst/tests/cuda/"
done
[[ -x "$src/examples/04_gpu_workers/gpu_workers" ]] && cp "$src/examples/04_gpu_workers/gpu_workers" "$dst/examples/04_gpu_workers/"
[[ -x "$src/benchmarks/bench_cuda" ]] && cp "$src/benchmarks/bench_cuda" "$dst/benchmarks/"
# Symbols too: a carried binary only has to run (64 MiB carry limit, the tree included).
strip --strip-unneeded "$dst"/tests/cuda/* "$dst"/examples/04_gpu_workers/* "$dst"/benchmarks/* 2> /dev/null || true
# The small shared libraries they need that a GPU machine may lack or hold in another
# version (the CUDA runtime, Google Benchmark); NCCL is too large to carry: gpu_check.sh
# looks for the GPU machine's own (its Python's nvidia-nccl wheel, say).
mkdir -p "$dst/lib"
for lib in libcudart.so.13 libbenchmark.so.1debian; do
    path=$(ldd "$dst"/benchmarks/bench_cuda "$dst"/tests/cuda/test_device_sparta 2> /dev/null |
        awk -v l="$lib" '$1 == l { print $3; exit }')
    [[ -n "$path" && -f "$path" ]] && cp -L "$path" "$dst/lib/"
done
# The Python package, where a CUDA build of it is installed (TRICKLE_PY_SITE: that
# site-packages; default the PyPI torch environment of scripts/pypi_torch.sh), for
# gpu_check.sh's Python stage on a GPU machine with the same torch.
# GPU_BUNDLE_PYTHON=0 leaves it out (the quick check has no Python stage, and the package's
# 27 MB would not fit beside the tree and the rest under the 64 MiB carry limit).
site=${TRICKLE_PY_SITE:-$(ls -d "$root"/build/pypi-torch/lib/python3*/site-packages 2> /dev/null | head -1 || true)}
[[ "${GPU_BUNDLE_PYTHON:-1}" == 0 ]] && site=
if [[ -n "$site" && -f "$site/trickle/__init__.py" ]] && ls "$site"/trickle/_C*.so > /dev/null 2>&1; then
    mkdir -p "$dst/python"
    cp -r "$site/trickle" "$dst/python/"
    rm -rf "$dst/python/trickle/__pycache__"
    strip --strip-unneeded "$dst"/python/trickle/_C*.so 2> /dev/null || true # 33 MB -> 27 MB
    echo "gpu_bundle: the Python package from $site (CUDA build: see trickle.build_info() there)"
fi
# The benchmark of an earlier commit, built from a worktree of this repository.
if [[ -n "${GPU_BUNDLE_BEFORE:-}" ]]; then
    rev=$(git -C "$root" rev-parse --verify "${GPU_BUNDLE_BEFORE}^{commit}") ||
        { echo "$0: GPU_BUNDLE_BEFORE=$GPU_BUNDLE_BEFORE is not a commit of this repository" >&2; exit 1; }
    wt=$root/build/before-src
    if [[ "$(git -C "$wt" rev-parse HEAD 2> /dev/null)" != "$rev" ]]; then
        git -C "$root" worktree remove --force "$wt" 2> /dev/null || rm -rf "$wt"
        git -C "$root" worktree prune
        git -C "$root" worktree add --detach "$wt" "$rev" > /dev/null
    fi
    bb=$root/build/before-$(git -C "$root" rev-parse --short "$rev")
    cmake -S "$wt" -B "$bb" -DCMAKE_BUILD_TYPE=Release -DTRICKLE_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DTRICKLE_BUILD_BENCHMARKS=ON -DTRICKLE_BUILD_TESTS=OFF -DTRICKLE_BUILD_EXAMPLES=OFF -DTRICKLE_ENABLE_TORCH=OFF \
        > "$bb.log" 2>&1 && cmake --build "$bb" --target bench_cuda -j "$(nproc)" >> "$bb.log" 2>&1 ||
        { echo "$0: the build of bench_cuda at $rev failed: see $bb.log" >&2; exit 1; }
    mkdir -p "$dst/before"
    cp "$bb/benchmarks/bench_cuda" "$dst/before/"
    strip --strip-unneeded "$dst/before/bench_cuda" 2> /dev/null || true
    echo "$rev" > "$dst/before/commit"
    echo "gpu_bundle: bench_cuda at $rev in $dst/before"
fi
# One archive of it all (xz: the binaries shrink about 3x), for the carry limit: carry
# build/gpu.tar.xz and gpu_check.sh unpacks it where build/gpu is missing.
rm -f "$root/build/gpu.tar.xz"
tar -C "$root/build" -cf - gpu | xz -T0 -6 > "$root/build/gpu.tar.xz"
du -sh "$dst" "$root/build/gpu.tar.xz"
