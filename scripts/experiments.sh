#!/usr/bin/env bash
# Reproduces docs/experiments.md: runs trickle-sim on the Debian license texts for every
# experiment (CSV files in docs/experiments/), then draws the figures
# (scripts/plot_experiments.py). About 15 minutes on two cores.
#   scripts/experiments.sh                  build (Release preset) and run everything
#   SIM=path/to/trickle-sim scripts/experiments.sh   use an existing binary
#   scripts/experiments.sh --plot-only      redraw the figures from the existing CSVs
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=docs/experiments
mkdir -p "$OUT"

if [ "${1:-}" != "--plot-only" ]; then
    source scripts/sim_corpus.sh
    trickle_sim_and_corpus
    # The corpus (scripts/sim_corpus.sh): the last 10% (mostly MPL-2.0) is held out.

    run() { # run NAME ARGS...: one trickle-sim invocation, its CSV and its table
        local name=$1
        shift
        echo "== $name: trickle-sim --data $CORPUS $* --quiet --csv $OUT/$name.csv" >&2
        "$SIM" --data "$CORPUS" "$@" --quiet --csv "$OUT/$name.csv" > "$OUT/$name.txt"
        sed -n '/^strategy /,/^$/p' "$OUT/$name.txt" >&2
    }
    run_generated() { # the same on the generated corpus (no --data)
        local name=$1
        shift
        echo "== $name: trickle-sim $* --quiet --csv $OUT/$name.csv" >&2
        "$SIM" "$@" --quiet --csv "$OUT/$name.csv" > "$OUT/$name.txt"
        sed -n '/^strategy /,/^$/p' "$OUT/$name.txt" >&2
    }

    # 1. SPARTA at 0.5% against ddp and independent replicas, on 1, 2, 4 and 8 workers.
    run workers1 --workers 1 --strategy none
    for w in 2 4 8; do run "workers$w" --workers "$w" --strategy ddp,none,sparta; done

    # 2. The fraction p (4 workers), and the correlation it buys over the steps.
    for p in 0.0005 0.001 0.002 0.005 0.01 0.02 0.05; do run "fraction_$p" --strategy sparta --fraction "$p"; done

    # 3. SPARTA at 0.5% every H steps.
    for h in 5 20 50 100; do run "interval_$h" --strategy sparta --interval "$h"; done

    # 4. DiLoCo (H = 100) against SPARTA + DiLoCo, and DiLoCo's outer optimizers.
    run diloco_nesterov --strategy diloco,sparta-diloco
    for o in sgd momentum adam average; do run "diloco_$o" --strategy diloco --outer "$o"; done

    # 5. iid against non-iid shards.
    run noniid --strategy ddp,none,sparta,diloco --shards non-iid

    # 6. DiLoCo with dropped communication, and with pruned outer gradients.
    for q in 0.25 0.5; do run "drop_$q" --strategy diloco --drop-prob "$q"; done
    for q in 0.5 0.75; do run "prune_$q" --strategy diloco --prune "$q"; done

    # 7. The main comparison again under two more seeds (data order, initialisation,
    #    sampler): how much of a difference is noise.
    for s in 7 1234; do run "seed_$s" --strategy ddp,none,sparta,diloco,sparta-diloco --seed "$s"; done

    # 8. DiLoCo against SPARTA + DiLoCo on the generated corpus, three seeds.
    for s in 42 7 1234; do run_generated "generated_seed_$s" --strategy diloco,sparta-diloco --seed "$s"; done
fi

# Debian's python3-matplotlib serves /usr/bin/python3; another python3 first on PATH
# (pyenv, a venv) may lack it.
PY=python3
if ! python3 -c 'import matplotlib' 2>/dev/null && [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; fi
"$PY" scripts/plot_experiments.py "$OUT"
