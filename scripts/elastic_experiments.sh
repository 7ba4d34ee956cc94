#!/usr/bin/env bash
# Reproduces the results of docs/elastic.md ("Results"): trickle-sim on the Debian license
# texts (as scripts/experiments.sh), 8 workers, the default MLP, outer steps every 100
# steps, STEPS inner steps, seeds SEEDS. For DiLoCo and SPARTA + DiLoCo (SPARTA at its
# defaults: p = 0.005 every step):
#   fixed           the fixed world (comm::local)
#   fail-K          K workers (the last K ids) fail before step FAIL_AT and rejoin at JOIN_AT
#                   (admitted at the next round), K = 1, 2, 4
#   fail-K-norejoin the same failures, never rejoining
# and for DiLoCo alone (--speeds needs DiLoCo's manual outer steps):
#   deadline        speeds 1,1,1,1,0.5,0.5,0.25,0.25, rounds at a deadline (--round-policy deadline)
#   wait            the same speeds, every round waits for the slowest (--round-policy wait)
#   fast-only       the 4 speed-1 workers alone: the 4 slow ones fail before step 0
# Files STRATEGY.NAME.seedS.csv and .txt in docs/experiments/elastic/, then the figures
# and summary.md (scripts/plot_elastic.py). About 12 minutes on two cores (706 s, shared
# with other jobs: load about 6).
#   scripts/elastic_experiments.sh               build (Release preset) and run everything
#   SIM=path/to/trickle-sim scripts/elastic_experiments.sh
#   scripts/elastic_experiments.sh --plot-only   redraw from the existing CSVs
#   STEPS=3000 SEEDS="1 2 3" FAIL_AT=1050 JOIN_AT=2050 (the defaults) change the runs
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-docs/experiments/elastic}
mkdir -p "$OUT"
STEPS=${STEPS:-3000}
SEEDS=${SEEDS:-"1 2 3"}
FAIL_AT=${FAIL_AT:-1050}
JOIN_AT=${JOIN_AT:-2050}

if [ "${1:-}" != "--plot-only" ]; then
    source scripts/sim_corpus.sh
    trickle_sim_and_corpus

    run() { # run STRATEGY NAME SEED [ARGS...]: one configuration, one seed
        local strategy=$1 name=$2 seed=$3
        shift 3
        local args=(--data "$CORPUS" --seed "$seed" --workers 8 --strategy "$strategy" --outer-interval 100
                    --steps "$STEPS" --eval-every 100 "$@" --quiet)
        echo "== $strategy $name seed $seed: trickle-sim ${args[*]}" >&2
        local t0=$SECONDS
        "$SIM" "${args[@]}" --csv "$OUT/$strategy.$name.seed$seed.csv" > "$OUT/$strategy.$name.seed$seed.txt"
        echo "   $((SECONDS - t0)) s" >&2
    }
    failing() { # failing K STEP: the last K of 8 ids at STEP, as W@STEP,...
        local k=$1 at=$2 list="" w
        for ((w = 8 - k; w < 8; ++w)); do list+="${list:+,}$w@$at"; done
        echo "$list"
    }
    configs() { # every configuration: STRATEGY NAME ARGS... per line
        for strategy in diloco sparta-diloco; do
            echo "$strategy fixed"
            for k in 1 2 4; do
                echo "$strategy fail-$k --fail $(failing "$k" "$FAIL_AT") --join $(failing "$k" "$JOIN_AT")"
                echo "$strategy fail-$k-norejoin --fail $(failing "$k" "$FAIL_AT")"
            done
        done
        echo "diloco deadline --speeds 1,1,1,1,0.5,0.5,0.25,0.25 --round-policy deadline"
        echo "diloco wait --speeds 1,1,1,1,0.5,0.5,0.25,0.25 --round-policy wait"
        echo "diloco fast-only --fail $(failing 4 0)"
    }
    start=$SECONDS
    while read -r strategy name args; do
        for seed in $SEEDS; do
            # shellcheck disable=SC2086
            run "$strategy" "$name" "$seed" $args
        done
    done < <(configs)
    echo "all runs: $((SECONDS - start)) s" >&2
fi
# Debian's python3 has matplotlib (python3-matplotlib); another python3 first on PATH may not.
PY=python3
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null && PY=/usr/bin/python3
"$PY" scripts/plot_elastic.py "$OUT" --fail-at "$FAIL_AT" --join-at "$JOIN_AT"
