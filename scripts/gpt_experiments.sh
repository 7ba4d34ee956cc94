#!/usr/bin/env bash
# Reproduces the section "The GPT at its default size, three seeds" of docs/experiments.md:
# trickle-sim --model gpt (default size, 104,960 parameters with this vocabulary) on the
# Debian license texts, every configuration under three seeds, one CSV and one TXT per run
# in docs/experiments/gpt/, then the figures (scripts/plot_gpt_experiments.py).
#
#   scripts/gpt_experiments.sh              build trickle-sim in build/gpt-exp, run 1..9, 5b, D, R, R2
#   scripts/gpt_experiments.sh 1 2 4        run only those experiments (numbers below; 5b is
#                                           experiment 5 at H = 50 and 500; D is DeMo; R is the research
#                                           size, about an hour on two quiet cores; R2 more
#                                           research-size runs, about 25 minutes a seed)
#   SIM=path/to/trickle-sim scripts/gpt_experiments.sh   use an existing binary
#   SEEDS="42 7" scripts/gpt_experiments.sh              other seeds (default 42 7 1234)
#   FORCE=1 ...                              rerun runs whose files already exist
#   scripts/gpt_experiments.sh --plot-only  redraw the figures and tables from the CSVs
#
# A run whose TXT already holds a result table is skipped, so an interrupted sweep resumes
# where it stopped. Every simulation runs under `nice -n ${NICE:-10}` and one at a time.
# Run times on the shared 2-core development machine are given in docs/experiments.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=docs/experiments/gpt
mkdir -p "$OUT"
SEEDS=${SEEDS:-"42 7 1234"}
NICE=${NICE:-10}

plot() {
    # Debian's python3-matplotlib serves /usr/bin/python3; another python3 first on PATH
    # (pyenv, a venv) may lack it.
    local py=python3
    if ! python3 -c 'import matplotlib' 2>/dev/null && [ -x /usr/bin/python3 ]; then py=/usr/bin/python3; fi
    "$py" scripts/plot_gpt_experiments.py "$OUT"
}

if [ "${1:-}" = "--plot-only" ]; then
    plot
    exit 0
fi

if [ -z "${SIM:-}" ]; then
    # Our own Release build directory, only the simulator target.
    cmake -S . -B build/gpt-exp -DCMAKE_BUILD_TYPE=Release >/dev/null
    nice -n "$NICE" cmake --build build/gpt-exp -j 2 --target trickle-sim >/dev/null
    SIM=build/gpt-exp/examples/sim/trickle-sim
fi
source scripts/sim_corpus.sh
trickle_sim_and_corpus   # SIM is set, so this only writes the corpus to /tmp/licenses.txt

EXPERIMENTS=${*:-"1 2 3 4 5 6 7 5b 8 9 D R R2"}
want() { [[ " $EXPERIMENTS " == *" $1 "* ]]; }

run() { # run NAME ARGS...: one trickle-sim invocation (GPT, license text), its CSV and TXT
    local name=$1
    shift
    if [ -z "${FORCE:-}" ] && [ -f "$OUT/$name.txt" ] && grep -q '^strategy ' "$OUT/$name.txt"; then
        echo "== $name: done already" >&2
        return
    fi
    echo "== $name: trickle-sim --model gpt --data $CORPUS $* --quiet --csv $OUT/$name.csv" >&2
    local t0=$SECONDS
    nice -n "$NICE" "$SIM" --model gpt --data "$CORPUS" "$@" --quiet \
        --csv "$OUT/$name.csv.part" > "$OUT/$name.txt.part"
    mv "$OUT/$name.csv.part" "$OUT/$name.csv"
    mv "$OUT/$name.txt.part" "$OUT/$name.txt"
    sed -n '/^strategy /,/^$/p' "$OUT/$name.txt" >&2
    echo "   ($((SECONDS - t0)) s)" >&2
}

# final_mean FILE_GLOB STRATEGY: mean over the matching CSVs of the strategy's last eval loss
final_mean() {
    local strategy=$2
    # shellcheck disable=SC2086
    awk -F, -v s="$strategy" 'FNR > 1 && $1 == s { last[FILENAME] = $3 }
        END { n = 0; t = 0; for (f in last) { t += last[f]; n++ } if (n) printf "%.6f\n", t / n; else print "nan" }' $1
}

for seed in $SEEDS; do
    # 1. ddp vs independent replicas vs SPARTA 0.5% on 2, 4 and 8 workers, and one worker
    #    alone (the blog's single-node baseline). workers4 also serves as p = 0.5%
    #    (experiment 2) and H = 1 (experiment 3).
    if want 1; then
        run "workers1_s$seed" --workers 1 --strategy none --seed "$seed"
        for w in 4 2 8; do run "workers${w}_s$seed" --workers "$w" --strategy ddp,none,sparta --seed "$seed"; done
    fi
done
for seed in $SEEDS; do
    # 2. SPARTA's fraction p (4 workers, every step).
    if want 2; then
        for p in 0.0005 0.001 0.002 0.02 0.05; do run "fraction_${p}_s$seed" --strategy sparta --fraction "$p" --seed "$seed"; done
    fi
done
for seed in $SEEDS; do
    # 3. SPARTA 0.5% every H steps (H = 1 is workers4).
    if want 3; then
        for h in 5 20 50; do run "interval_${h}_s$seed" --strategy sparta --interval "$h" --seed "$seed"; done
    fi
done
for seed in $SEEDS; do
    # 4. DiLoCo (H = 100, Nesterov 0.7/0.9) against SPARTA + DiLoCo (SPARTA 0.5% between
    #    outer steps). Its diloco rows are also experiment 5's Nesterov at H = 100.
    if want 4; then
        run "diloco_s$seed" --strategy diloco,sparta-diloco --seed "$seed"
    fi
done
for seed in $SEEDS; do
    # 5. DiLoCo's outer optimizers at H = 100 (each at the simulator's default outer lr).
    if want 5; then
        for o in sgd momentum adam average; do run "outer_${o}_h100_s$seed" --strategy diloco --outer "$o" --seed "$seed"; done
    fi
done
for seed in $SEEDS; do
    # 6. DiLoCo (H = 100, Nesterov) with 25% and 50% of the outer gradients dropped, and
    #    with the smallest 50% of each tensor's outer gradient pruned.
    if want 6; then
        for q in 0.25 0.5; do run "drop_${q}_s$seed" --strategy diloco --drop-prob "$q" --seed "$seed"; done
        run "prune_0.5_s$seed" --strategy diloco --prune 0.5 --seed "$seed"
    fi
done
for seed in $SEEDS; do
    # 7. SPARTA 0.5% on 8 workers over the gossip topologies (all-reduce is workers8).
    #    Islands of 4: islands of 2 would be random pairs, as gossip.
    if want 7; then
        for t in gossip exponential; do run "topology_${t}_s$seed" --workers 8 --strategy sparta --topology "$t" --seed "$seed"; done
        run "topology_islands4_s$seed" --workers 8 --strategy sparta --topology islands --island-size 4 --seed "$seed"
    fi
done

if want 5b; then
    # 5b. (run last: the lowest priority) DiLoCo at H = 50 and 500, for Nesterov and for the
    #     best of the others at H = 100 (three-seed mean of the final eval loss).
    best=""
    best_loss=""
    for o in sgd momentum adam average; do
        m=$(final_mean "$OUT/outer_${o}_h100_s*.csv" diloco)
        echo "   outer $o, H = 100: mean final eval loss $m" >&2
        if [ "$m" != nan ] && { [ -z "$best_loss" ] || awk -v a="$m" -v b="$best_loss" 'BEGIN { exit !(a < b) }'; }; then
            best=$o
            best_loss=$m
        fi
    done
    echo "   best outer optimizer other than nesterov at H = 100: ${best:-none}" >&2
    for seed in $SEEDS; do
        for h in 50 500; do
            for o in nesterov $best; do
                run "outer_${o}_h${h}_s$seed" --strategy diloco --outer "$o" --outer-interval "$h" --seed "$seed"
            done
        done
    done
fi

for seed in $SEEDS; do
    # 8. The same topologies at 16 workers, against all-reduce (SPARTA 0.5%).
    if want 8; then
        run "topology16_allreduce_s$seed" --workers 16 --strategy sparta --seed "$seed"
        for t in gossip exponential; do run "topology16_${t}_s$seed" --workers 16 --strategy sparta --topology "$t" --seed "$seed"; done
        run "topology16_islands4_s$seed" --workers 16 --strategy sparta --topology islands --island-size 4 --seed "$seed"
    fi
done
for seed in $SEEDS; do
    # 9. Is the batch the cause of every method's gap to ddp? The default model with 16
    #    windows per worker per step instead of 4 (ddp, SPARTA 0.5%, DiLoCo H = 100).
    if want 9; then
        run "batch16_s$seed" --batch 16 --strategy ddp,sparta,diloco --seed "$seed"
    fi
done
# D. DeMo (docs/demo.md) against ddp, SPARTA 0.5% and DiLoCo H = 100 at the default size:
#    DeMo's published default (chunk 64, k 32), and k matched to DiLoCo's bytes per worker
#    (demo k 8: 96x less than ddp; demo-shared k 20: 98x) and to SPARTA's (demo k 4: 191x;
#    demo-shared k 10: 196x). --network internet models each method's wall time.
for seed in $SEEDS; do
    if want D; then
        NET=(--network internet)
        run "demo_base_s$seed" --strategy ddp,sparta,diloco "${NET[@]}" --seed "$seed"
        run "demo_k32_s$seed" --strategy demo,demo-shared "${NET[@]}" --seed "$seed"
        run "demo_k8_s$seed" --strategy demo --demo-k 8 "${NET[@]}" --seed "$seed"
        run "demo_shared_k20_s$seed" --strategy demo-shared --demo-k 20 "${NET[@]}" --seed "$seed"
        run "demo_k4_s$seed" --strategy demo --demo-k 4 "${NET[@]}" --seed "$seed"
        run "demo_shared_k10_s$seed" --strategy demo-shared --demo-k 10 "${NET[@]}" --seed "$seed"
    fi
done
# R. The research size (about 1.2M parameters; context 64,
#    16 windows per worker per step), 4 workers, 1,000 steps: each worker passes over its
#    shard about 15 times already, so 2,000 steps would mostly measure memorisation. DiLoCo
#    at H = 50 keeps the 20 outer steps of the default-size runs. Independent replicas
#    under one seed only (their failure is not in question).
RESEARCH=(--layers 6 --d-model 128 --heads 4 --context 64 --batch 16 --steps 1000 --eval-every 50)
H50=(--outer-interval 50) # only with a strategy that has outer steps (trickle-sim refuses it otherwise)
if want R; then
    for seed in $SEEDS; do
        run "research_s$seed" "${RESEARCH[@]}" "${H50[@]}" --strategy ddp,sparta,diloco,sparta-diloco --seed "$seed"
    done
    run "research_none_s42" "${RESEARCH[@]}" --strategy none --seed 42
fi
# R2. More of the seeds' questions at the research size (same settings as R): SPARTA at
#     p = 0.1% and 5% and every 20 steps; DiLoCo with plain averaging as the outer step,
#     with 50% of the outer gradients dropped, and with 50% pruned.
for seed in $SEEDS; do
    if want R2; then
        for p in 0.001 0.05; do run "research_fraction_${p}_s$seed" "${RESEARCH[@]}" --strategy sparta --fraction "$p" --seed "$seed"; done
        run "research_interval_20_s$seed" "${RESEARCH[@]}" --strategy sparta --interval 20 --seed "$seed"
        run "research_outer_average_s$seed" "${RESEARCH[@]}" "${H50[@]}" --strategy diloco --outer average --seed "$seed"
        run "research_drop_0.5_s$seed" "${RESEARCH[@]}" "${H50[@]}" --strategy diloco --drop-prob 0.5 --seed "$seed"
        run "research_prune_0.5_s$seed" "${RESEARCH[@]}" "${H50[@]}" --strategy diloco --prune 0.5 --seed "$seed"
    fi
done

plot
