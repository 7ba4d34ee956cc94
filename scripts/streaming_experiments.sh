#!/usr/bin/env bash
# Reproduces the results of docs/streaming.md: trickle-sim on the Debian license texts (as
# scripts/experiments.sh), 4 workers, the default MLP, 2000 steps, DiLoCo every 100 steps:
# blocking DiLoCo against streaming DiLoCo (F = 1, 2, 4, 7 fragments; tau = 0, 1, 5; one
# alpha = 0.5 point) and SPARTA with and without --overlap. Every run models its wall
# time on the three --network presets. Two passes:
#   A: seeds 1, 2, 3, compute per step as measured (the MLP's ~1 ms): losses, bytes, wall time
#   B: seed 1, --step-time 100 (a model whose step computes 100 ms): wall time only (the
#      losses are pass A's seed 1, bit for bit)
#   C: controls for the state the runs end in (below), seeds 1, 2, 3
# CSV and text files in docs/experiments/streaming/, then the figures
# (scripts/plot_streaming.py). About 12 minutes on two cores.
#   scripts/streaming_experiments.sh               build (Release preset) and run everything
#   SIM=path/to/trickle-sim scripts/streaming_experiments.sh
#   scripts/streaming_experiments.sh --plot-only   redraw from the existing CSVs
#   SIM=... scripts/streaming_experiments.sh --plot-only --controls   only pass C, then redraw
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=docs/experiments/streaming
mkdir -p "$OUT"

if [ "${1:-}" != "--plot-only" ]; then
    source scripts/sim_corpus.sh
    trickle_sim_and_corpus
    NET=datacenter+cross-region+internet

    run() { # run NAME SEED [ARGS...]: one configuration, one seed
        local name=$1 seed=$2
        shift 2
        echo "== $name seed $seed: trickle-sim --data $CORPUS --seed $seed $* --network $NET --quiet" >&2
        "$SIM" --data "$CORPUS" --seed "$seed" "$@" --network "$NET" --quiet \
            --csv "$OUT/$name.seed$seed.csv" > "$OUT/$name.seed$seed.txt"
    }
    configs() { # every configuration: NAME ARGS... per line
        echo "diloco --strategy diloco --outer-interval 100"
        for f in 1 2 4 7; do
            for tau in 0 1 5; do
                echo "stream-F$f-tau$tau --strategy streaming-diloco --outer-interval 100 --fragments $f --overlap-steps $tau"
            done
        done
        echo "stream-F4-tau5-mix0.5 --strategy streaming-diloco --outer-interval 100 --fragments 4 --overlap-steps 5 --mix 0.5"
        echo "sparta --strategy sparta --fraction 0.005"
        echo "sparta-overlap --strategy sparta --fraction 0.005 --overlap"
    }
    # Pass A: three seeds, measured compute.
    while read -r name args; do
        for seed in 1 2 3; do
            # shellcheck disable=SC2086
            run "$name" "$seed" $args
        done
    done < <(configs)
    # Pass B: one seed, 100 ms of compute per step.
    while read -r name args; do
        # shellcheck disable=SC2086
        run "$name-step100ms" 1 $args --step-time 100
    done < <(configs)
fi
if [ "${1:-}" != "--plot-only" ] || [ "${2:-}" = "--controls" ]; then
    SIM=${SIM:-build/host-release/examples/sim/trickle-sim}
    CORPUS=/tmp/licenses.txt
    [ -f "$CORPUS" ] || cat /usr/share/common-licenses/* > "$CORPUS"
    NET=datacenter+cross-region+internet
    # Pass C: the end-of-run state. Blocking DiLoCo's last evaluation follows an outer step;
    # with tau > 0 the last outer step is still in flight and the evaluation averages
    # replicas 100 steps after the previous one landed. Two controls put them level:
    # blocking DiLoCo evaluated one step before its last outer step (step 1999), and
    # streaming F = 1, tau = 5 run until its last outer step has landed (step 2005).
    for seed in 1 2 3; do
        for ctl in "diloco-1999 --strategy diloco --outer-interval 100 --steps 1999" \
                   "stream-F1-tau5-2005 --strategy streaming-diloco --outer-interval 100 --fragments 1 --overlap-steps 5 --steps 2005"; do
            read -r name args <<< "$ctl"
            echo "== $name seed $seed" >&2
            # shellcheck disable=SC2086
            "$SIM" --data "$CORPUS" --seed "$seed" $args --network "$NET" --quiet \
                --csv "$OUT/$name.seed$seed.csv" > "$OUT/$name.seed$seed.txt"
        done
    done
fi
# Debian's python3 has matplotlib (python3-matplotlib); another python3 first on PATH may not.
PY=python3
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null && PY=/usr/bin/python3
"$PY" scripts/plot_streaming.py "$OUT"
