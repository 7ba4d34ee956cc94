#!/usr/bin/env bash
# Reproduces docs/experiments.md: runs trickle-sim on the Debian license texts for every
# experiment (CSV files in docs/experiments/), then draws the figures
# (scripts/plot_experiments.py). About 6 minutes on two cores for experiments 1-8, 5 more
# for 9 (the decisive configurations under two more seeds).
#   scripts/experiments.sh                  build (Release preset) and run experiments 1-9
#   scripts/experiments.sh 9                only those experiments (numbers below)
#   SIM=path/to/trickle-sim scripts/experiments.sh   use an existing binary
#   FORCE=1 ...                             rerun runs whose files already exist
#   scripts/experiments.sh --plot-only      redraw the figures from the existing CSVs
# A run whose TXT already holds a result table is skipped, so an interrupted sweep resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=docs/experiments
mkdir -p "$OUT"

if [ "${1:-}" != "--plot-only" ]; then
    source scripts/sim_corpus.sh
    trickle_sim_and_corpus
    # The corpus (scripts/sim_corpus.sh): the last 10% (mostly MPL-2.0) is held out.

    EXPERIMENTS=${*:-"1 2 3 4 5 6 7 8 9"}
    want() { [[ " $EXPERIMENTS " == *" $1 "* ]]; }

    run_generated() { # run_generated NAME ARGS...: one trickle-sim invocation, its CSV and table
        local name=$1
        shift
        if [ -z "${FORCE:-}" ] && [ -f "$OUT/$name.txt" ] && grep -q '^strategy ' "$OUT/$name.txt"; then
            echo "== $name: done already" >&2
            return
        fi
        echo "== $name: trickle-sim $* --quiet --csv $OUT/$name.csv" >&2
        "$SIM" "$@" --quiet --csv "$OUT/$name.csv.part" > "$OUT/$name.txt.part"
        mv "$OUT/$name.csv.part" "$OUT/$name.csv"
        mv "$OUT/$name.txt.part" "$OUT/$name.txt"
        sed -n '/^strategy /,/^$/p' "$OUT/$name.txt" >&2
    }
    run() { # the same on the license texts
        local name=$1
        shift
        run_generated "$name" --data "$CORPUS" "$@"
    }

    # 1. SPARTA at 0.5% against ddp and independent replicas, on 1, 2, 4 and 8 workers.
    if want 1; then
        run workers1 --workers 1 --strategy none
        for w in 2 4 8; do run "workers$w" --workers "$w" --strategy ddp,none,sparta; done
    fi

    # 2. The fraction p (4 workers), and the correlation it buys over the steps.
    if want 2; then
        for p in 0.0005 0.001 0.002 0.005 0.01 0.02 0.05; do run "fraction_$p" --strategy sparta --fraction "$p"; done
    fi

    # 3. SPARTA at 0.5% every H steps.
    if want 3; then
        for h in 5 20 50 100; do run "interval_$h" --strategy sparta --interval "$h"; done
    fi

    # 4. DiLoCo (H = 100) against SPARTA + DiLoCo, and DiLoCo's outer optimizers.
    if want 4; then
        run diloco_nesterov --strategy diloco,sparta-diloco
        for o in sgd momentum adam average; do run "diloco_$o" --strategy diloco --outer "$o"; done
    fi

    # 5. iid against non-iid shards.
    if want 5; then
        run noniid --strategy ddp,none,sparta,diloco --shards non-iid
    fi

    # 6. DiLoCo with dropped communication, and with pruned outer gradients.
    if want 6; then
        for q in 0.25 0.5; do run "drop_$q" --strategy diloco --drop-prob "$q"; done
        for q in 0.5 0.75; do run "prune_$q" --strategy diloco --prune "$q"; done
    fi

    # 7. The main comparison again under two more seeds (data order, initialisation,
    #    sampler): how much of a difference is noise.
    if want 7; then
        for s in 7 1234; do run "seed_$s" --strategy ddp,none,sparta,diloco,sparta-diloco --seed "$s"; done
    fi

    # 8. DiLoCo against SPARTA + DiLoCo on the generated corpus, three seeds.
    if want 8; then
        for s in 42 7 1234; do run_generated "generated_seed_$s" --strategy diloco,sparta-diloco --seed "$s"; done
    fi

    # 9. The decisive configurations of 1-6 again under seeds 7 and 1234 (seed 42 is the run
    #    above; 7 already holds the main comparison under both): every verdict in
    #    docs/experiments.md is judged on the three seeds' spread. Files <name>_s<seed>.
    if want 9; then
        for s in 7 1234; do
            run "workers1_s$s" --workers 1 --strategy none --seed "$s"
            for w in 2 8; do run "workers${w}_s$s" --workers "$w" --strategy ddp,none,sparta --seed "$s"; done
            for p in 0.001 0.002 0.02; do run "fraction_${p}_s$s" --strategy sparta --fraction "$p" --seed "$s"; done
            for h in 5 20; do run "interval_${h}_s$s" --strategy sparta --interval "$h" --seed "$s"; done
            for o in sgd momentum adam average; do run "diloco_${o}_s$s" --strategy diloco --outer "$o" --seed "$s"; done
            for q in 0.25 0.5; do run "drop_${q}_s$s" --strategy diloco --drop-prob "$q" --seed "$s"; done
            run "prune_0.5_s$s" --strategy diloco --prune 0.5 --seed "$s"
        done
    fi
fi

# Debian's python3-matplotlib serves /usr/bin/python3; another python3 first on PATH
# (pyenv, a venv) may lack it.
PY=python3
if ! python3 -c 'import matplotlib' 2>/dev/null && [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; fi
"$PY" scripts/plot_experiments.py "$OUT"
