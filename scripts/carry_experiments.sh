#!/usr/bin/env bash
# The quality of a late DiLoCo outer step (docs/streaming.md, "Landing late: replacement or
# carry_local"): trickle-sim on the Debian license texts (as scripts/streaming_experiments.sh),
# 4 workers, the default MLP, 2000 steps, an outer step every H = 100 steps, seeds 1, 2, 3:
# blocking DiLoCo against the outer step landing tau = 50 and 90 steps late, by Streaming
# DiLoCo's replacement and by carry_local (and F = 4 fragments, tau = 50, carry_local).
# Writes CSV and text files to docs/experiments/carry/ and summary.md there: per
# configuration the eval loss at step 2000 and the mean of the last five evaluations
# (steps 1600-2000; a late average leaves the workers' models between two rounds, so one
# point depends on where the run stops). About 4 minutes on two cores, plus the build.
#   scripts/carry_experiments.sh                 build (Release preset) and run
#   SIM=path/to/trickle-sim scripts/carry_experiments.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=docs/experiments/carry
mkdir -p "$OUT"
source scripts/sim_corpus.sh
trickle_sim_and_corpus
configs() { # NAME ARGS...
    echo "diloco --strategy diloco --outer-interval 100"
    for tau in 50 90; do
        echo "replace-tau$tau --strategy streaming-diloco --outer-interval 100 --fragments 1 --overlap-steps $tau"
        echo "carry-tau$tau --strategy streaming-diloco --outer-interval 100 --fragments 1 --overlap-steps $tau --carry-local"
    done
    echo "carry-F4-tau50 --strategy streaming-diloco --outer-interval 100 --fragments 4 --overlap-steps 50 --carry-local"
}
while read -r name args; do
    for seed in 1 2 3; do
        echo "== $name seed $seed: trickle-sim --data $CORPUS --seed $seed $args --quiet" >&2
        # shellcheck disable=SC2086
        "$SIM" --data "$CORPUS" --seed "$seed" $args --quiet --csv "$OUT/$name.seed$seed.csv" > "$OUT/$name.seed$seed.txt"
    done
done < <(configs)
python3 - "$OUT" <<'PY'
import csv, statistics, sys, os
out = sys.argv[1]
names = ["diloco", "replace-tau50", "carry-tau50", "replace-tau90", "carry-tau90", "carry-F4-tau50"]
lines = ["| configuration | eval loss at step 2000, mean [min, max] of 3 seeds | mean of the last 5 evaluations, mean [min, max] |",
         "|---|---|---|"]
for n in names:
    finals, tails = [], []
    for s in (1, 2, 3):
        rows = list(csv.DictReader(open(os.path.join(out, f"{n}.seed{s}.csv"))))
        evals = [float(r["eval_loss"]) for r in rows if r["eval_loss"]]
        finals.append(evals[-1])
        tails.append(statistics.mean(evals[-5:]))
    f = lambda v: f"{statistics.mean(v):.4f} [{min(v):.4f}, {max(v):.4f}]"
    lines.append(f"| {n} | {f(finals)} | {f(tails)} |")
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
