#!/usr/bin/env bash
# The main job: builds trickle-sim (Release) and runs it with its defaults — a character
# language model trained by 4 simulated workers under ddp, independent replicas, SPARTA,
# DiLoCo and SPARTA + DiLoCo, compared on quality against bytes sent. Extra arguments go to trickle-sim
# (scripts/run.sh --help lists them). Installs the missing Debian packages the simulator's
# build needs when run as root (the `sim` set of scripts/deps.sh: cmake, g++, make, doctest,
# OpenBLAS; not libtorch, MPI or the Python build, which only scripts/test.sh needs).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
trickle_install_deps sim
cmake --preset host-release >/dev/null
cmake --build --preset host-release -j "$(trickle_jobs)" --target trickle-sim >/dev/null
exec build/host-release/examples/sim/trickle-sim "$@"
