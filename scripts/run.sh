#!/usr/bin/env bash
# The main job: builds trickle-sim (Release) and runs it with its defaults — a character
# language model trained by 4 simulated workers under ddp, independent replicas, SPARTA,
# DiLoCo and SPARTA + DiLoCo, compared on quality against bytes sent. Extra arguments go to trickle-sim
# (scripts/run.sh --help lists them). Installs missing Debian packages when run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
trickle_install_deps
cmake --preset host-release >/dev/null
cmake --build --preset host-release -j "$(trickle_jobs)" --target trickle-sim >/dev/null
exec build/host-release/examples/sim/trickle-sim "$@"
