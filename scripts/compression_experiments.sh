#!/usr/bin/env bash
# Reproduces the compression frontier of docs/compression.md: trickle-sim on the Debian
# license texts (as scripts/experiments.sh), 4 workers, 2000 steps, every configuration
# under seeds 1, 2 and 3 (CSV files in docs/experiments/compression/), then the figure
# (scripts/plot_compression.py). About 15 minutes on two cores.
#   scripts/compression_experiments.sh               build (Release preset) and run everything
#   SIM=path/to/trickle-sim scripts/compression_experiments.sh
#   scripts/compression_experiments.sh --plot-only   redraw from the existing CSVs
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=docs/experiments/compression
mkdir -p "$OUT"

if [ "${1:-}" != "--plot-only" ]; then
    source scripts/sim_corpus.sh
    trickle_sim_and_corpus

    point() { # point NAME ARGS...: one configuration under three seeds
        local name=$1
        shift
        for seed in 1 2 3; do
            echo "== $name seed $seed: trickle-sim --data $CORPUS --seed $seed $* --quiet" >&2
            "$SIM" --data "$CORPUS" --seed "$seed" "$@" --quiet --csv "$OUT/$name.seed$seed.csv" > "$OUT/$name.seed$seed.txt"
        done
    }
    point ddp                 --strategy ddp
    point sparta-fp32         --strategy sparta --fraction 0.005
    point sparta-bf16         --strategy sparta --fraction 0.005 --codec bf16
    point sparta0.001-bf16    --strategy sparta --fraction 0.001 --codec bf16
    point sparta0.0002-bf16   --strategy sparta --fraction 0.0002 --codec bf16
    point sparta0.0001-fp32   --strategy sparta --fraction 0.0001
    point diloco-fp32         --strategy diloco --outer-interval 100
    point diloco-int8         --strategy diloco --outer-interval 100 --outer-codec int8
    point diloco-fp8          --strategy diloco --outer-interval 100 --outer-codec fp8_e4m3
    point diloco-fp8block     --strategy diloco --outer-interval 100 --outer-codec fp8_block
    point diloco-int4         --strategy diloco --outer-interval 100 --outer-codec int4
    point diloco-sign2        --strategy diloco --outer-interval 100 --outer-codec sign2
    point diloco-sign2-ef     --strategy diloco --outer-interval 100 --outer-codec sign2 --error-feedback 1
    point diloco500-int4-ef   --strategy diloco --outer-interval 500 --outer-codec int4 --error-feedback 1
    point diloco500-sign2-ef  --strategy diloco --outer-interval 500 --outer-codec sign2 --error-feedback 1
    point sparta-diloco-int8  --strategy sparta-diloco --fraction 0.005 --outer-interval 100 --codec bf16 --outer-codec int8
    point diloco-top4of64-sign2     --strategy diloco --outer-interval 100 --outer-topk 64:4 --outer-codec sign2 --codec-block 4
    point diloco-top4of64-sign2-ef  --strategy diloco --outer-interval 100 --outer-topk 64:4 --outer-codec sign2 --codec-block 4 --error-feedback 1
    point diloco-top1of64-fp8-ef    --strategy diloco --outer-interval 100 --outer-topk 64:1 --outer-codec fp8_e4m3 --error-feedback 1
    point diloco200-int4            --strategy diloco --outer-interval 200 --outer-codec int4
    point diloco200-int4-ef         --strategy diloco --outer-interval 200 --outer-codec int4 --error-feedback 1
    point diloco-top4of64-sign2-ef0.5 --strategy diloco --outer-interval 100 --outer-topk 64:4 --outer-codec sign2 --codec-block 4 --error-feedback 0.5
    point diloco500-top4of64-sign2-ef --strategy diloco --outer-interval 500 --outer-topk 64:4 --outer-codec sign2 --codec-block 4 --error-feedback 1
fi
# Debian's python3 has matplotlib (python3-matplotlib); another python3 first on PATH may not.
PY=python3
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null && PY=/usr/bin/python3
"$PY" scripts/plot_compression.py "$OUT"
