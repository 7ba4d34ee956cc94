#!/usr/bin/env bash
# Reproduces the results of docs/robustness.md: trickle-sim on the Debian license texts
# (as scripts/experiments.sh), DiLoCo, 8 workers, the default MLP, outer steps every 100
# steps, STEPS inner steps, seeds SEEDS, one BLAS thread a run (JOBS runs at once).
#
# Robust aggregation: under each rule (mean, trimmed:2, median, clip:TAU)
#   honest          every worker honest
#   KIND-1, KIND-2  worker 7 (and 6) corrupt every contribution: scale:10, sign, noise:10,
#                   stale:5, nan (--byzantine; examples/sim/byzantine.hpp)
# Mixed speeds (1,1,1,1,0.5,0.5,0.25,0.25), each without and with a failure (worker 5
# dies before step FAIL_AT and rejoins at JOIN_AT, in the waiting runs' steps; the other
# policies' runs are longer, to the same modelled time, and scale both):
#   deadline        rounds at a fixed deadline of 100 ticks (--round-policy deadline)
#   adaptive        rounds at the adaptive deadline (--round-policy adaptive --deadline DEADLINE)
#   wait            every round waits for the slowest (--round-policy wait)
# Files NAME.seedS.csv and .txt in docs/experiments/robustness/, then the figures and
# summary.md (scripts/plot_robustness.py).
#   scripts/robustness_experiments.sh               build (Release preset) and run everything
#   SIM=path/to/trickle-sim scripts/robustness_experiments.sh
#   scripts/robustness_experiments.sh --plot-only   redraw from the existing CSVs
#   ONLY='speeds\.(wait|deadline).*' scripts/robustness_experiments.sh   the runs whose names match
#   STEPS=1000 SEEDS="1 2 3" TAU=15 JOBS=2 (the defaults) change the runs; TAU=15 is above
#   the honest workers' distance to the previous aggregate in most rounds (an honest clip:25
#   run clips none, clip:15 clips 8 of 80 contributions, clip:10 all of them; seed 1)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-docs/experiments/robustness}
mkdir -p "$OUT"
STEPS=${STEPS:-1000}
SEEDS=${SEEDS:-"1 2 3"}
TAU=${TAU:-15}
FAIL_AT=${FAIL_AT:-400}
JOIN_AT=${JOIN_AT:-700}
DEADLINE=${DEADLINE:-0.75,0,100,400}
JOBS=${JOBS:-2}
RULES=(mean trimmed:2 median "clip:$TAU")
KINDS=(scale:10 sign noise:10 stale:5 nan)
SPEEDS=1,1,1,1,0.5,0.5,0.25,0.25

if [ "${1:-}" != "--plot-only" ]; then
    source scripts/sim_corpus.sh
    trickle_sim_and_corpus

    configs() { # every run: NAME SEED STEPS ARGS... per line
        for seed in $SEEDS; do
            for rule in "${RULES[@]}"; do
                local r=${rule%%:*}
                echo "$r.honest $seed $STEPS --aggregate $rule"
                for kind in "${KINDS[@]}"; do
                    local k=${kind%%:*}
                    echo "$r.$k-1 $seed $STEPS --aggregate $rule --byzantine 7:$kind"
                    echo "$r.$k-2 $seed $STEPS --aggregate $rule --byzantine 6:$kind,7:$kind"
                done
            done
            # Each policy's runs cover about the modelled time of the waiting runs (4 STEPS:
            # a round waits 4 H for the 0.25 workers): F x STEPS steps, the failure at
            # F x FAIL_AT and the rejoin at F x JOIN_AT, with F = 4 for the fixed deadline (a
            # round lasts H), 2 for the adaptive one (its rounds last 200 to 400) and 1 for
            # waiting.
            for pf in deadline:4 adaptive:2 wait:1; do
                local policy=${pf%%:*} f=${pf##*:}
                # (no trailing blank: xargs -L would join the next line to this one)
                local args="--speeds $SPEEDS --round-policy $policy"
                [ "$policy" = adaptive ] && args="$args --deadline $DEADLINE"
                echo "speeds.$policy $seed $((f * STEPS)) $args"
                echo "speeds.$policy-fail $seed $((f * STEPS)) $args --fail 5@$((f * FAIL_AT)) --join 5@$((f * JOIN_AT))"
            done
        done
    }
    run() { # run NAME SEED STEPS [ARGS...]
        local name=$1 seed=$2 steps=$3
        shift 3
        local args=(--data "$CORPUS" --seed "$seed" --workers 8 --strategy diloco --outer-interval 100
                    --steps "$steps" --eval-every 100 "$@" --quiet)
        local t0=$SECONDS
        "$SIM" "${args[@]}" --csv "$OUT/$name.seed$seed.csv" > "$OUT/$name.seed$seed.txt"
        echo "== $name seed $seed ($((SECONDS - t0)) s): trickle-sim ${args[*]}" >&2
    }
    export -f run
    export SIM CORPUS OUT
    export OPENBLAS_NUM_THREADS=1
    start=$SECONDS
    # shellcheck disable=SC2016
    configs | grep -E "^(${ONLY:-.*}) " | xargs -P "$JOBS" -L 1 bash -c 'run "$@"' _
    echo "all runs: $((SECONDS - start)) s" >&2
fi
# Debian's python3 has matplotlib (python3-matplotlib); another python3 first on PATH may not.
PY=python3
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null && PY=/usr/bin/python3
"$PY" scripts/plot_robustness.py "$OUT"
