#!/usr/bin/env bash
# The elastic soak: the bar before a change to comm::elastic_group, the round protocol or
# the Python binding's elastic path lands (docs/elastic.md, "Tests").
#   scripts/elastic_soak.sh [SCHEDULES=50] [BUILD_DIR=build/host] [SUITE_RUNS=3]
#
# 1. C++: SCHEDULES random kill / freeze / restart schedules of elastic_worker processes
#    (tests/torch/test_elastic_processes.cpp, "random ... schedules": faults inside the
#    protocol, SIGKILL and SIGSTOP from outside, restarts), SCHEDULES more with the store
#    too killed and started again on its port ("random schedules with the store killed",
#    store_recovery), then the whole cross-process
#    suite (swept kill points, restarts, refusals) SUITE_RUNS times.
# 2. Python: SCHEDULES random schedules of examples/python/elastic.py's supervisor over
#    DiLoCo, SPARTA and SPARTA + DiLoCo (scripts/elastic_soak.py), when the package is
#    installed in build/pyenv (tests/python/run.sh --build-only).
# Each part stops at its first failure and prints its log; a lost worker, a hang or
# survivors whose bits differ is a failure. Exit status 0 when everything passed.
set -euo pipefail
cd "$(dirname "$0")/.."
schedules=${1:-50}
dir=${2:-build/host}
suite_runs=${3:-3}
bin="$dir/tests/torch/test_elastic_processes"
if [ ! -x "$bin" ]; then
    echo "elastic_soak: $bin is not built (cmake --build $dir --target test_elastic_processes elastic_worker)" >&2
    exit 2
fi
start=$(date +%s)

echo "== elastic_soak: $schedules random schedules from C++, and $schedules with store restarts"
log=/tmp/elastic_soak_cpp_random.log
t0=$(date +%s)
if ! TRICKLE_ELASTIC_SCHEDULES=$schedules ASAN_OPTIONS=detect_leaks=0 "$bin" \
        --test-case='*random kill*,*random schedules*' > "$log" 2>&1; then
    echo "elastic_soak: the C++ random schedules FAILED (log: $log)"
    tail -60 "$log"
    exit 1
fi
grep -E "schedules passed" "$log" | sed 's/^.*MESSAGE: //' || true
echo "elastic_soak: C++ random schedules passed in $(( $(date +%s) - t0 )) s"

for i in $(seq 1 "$suite_runs"); do
    t0=$(date +%s)
    log="/tmp/elastic_soak_suite_$i.log"
    if ! ASAN_OPTIONS=detect_leaks=0 "$bin" > "$log" 2>&1; then
        echo "elastic_soak: suite run $i of $suite_runs FAILED (log: $log)"
        tail -40 "$log"
        exit 1
    fi
    echo "elastic_soak: suite run $i of $suite_runs passed in $(( $(date +%s) - t0 )) s"
    rm -f "$log"
done

py=build/pyenv/bin/python
if [ -x "$py" ] && "$py" -c 'import trickle' 2>/dev/null; then
    echo "== elastic_soak: $schedules random schedules from Python"
    "$py" scripts/elastic_soak.py --schedules "$schedules"
else
    echo "elastic_soak: the Python part is skipped: trickle is not installed in $py (tests/python/run.sh --build-only)"
fi
echo "elastic_soak: everything passed in $(( $(date +%s) - start )) s"
