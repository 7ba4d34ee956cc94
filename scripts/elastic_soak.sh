#!/usr/bin/env bash
# Runs the cross-process elastic suite (tests/torch/test_elastic_processes.cpp: worker
# processes killed with SIGKILL at swept points, restarted, refused) N times in a loop,
# stopping at the first failure: the bar before a change to comm::elastic_group or the
# round protocol lands (docs/elastic.md).
#   scripts/elastic_soak.sh [N=20] [BUILD_DIR=build/host]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
dir=${2:-build/host}
bin="$dir/tests/torch/test_elastic_processes"
if [ ! -x "$bin" ]; then
    echo "elastic_soak: $bin is not built (cmake --build $dir --target test_elastic_processes)" >&2
    exit 2
fi
start=$(date +%s)
for i in $(seq 1 "$n"); do
    t0=$(date +%s)
    if ! ASAN_OPTIONS=detect_leaks=0 "$bin" > "/tmp/elastic_soak_$i.log" 2>&1; then
        echo "elastic_soak: run $i of $n FAILED (log: /tmp/elastic_soak_$i.log)"
        tail -40 "/tmp/elastic_soak_$i.log"
        exit 1
    fi
    echo "elastic_soak: run $i of $n passed in $(( $(date +%s) - t0 )) s"
    rm -f "/tmp/elastic_soak_$i.log"
done
echo "elastic_soak: $n of $n runs passed in $(( $(date +%s) - start )) s"
