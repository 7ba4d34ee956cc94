#!/usr/bin/env bash
# tests/python/run.sh: builds trickle's Python package (python/) into a virtual environment
# and runs its tests: tests/python/test_local.py, test_registry.py, test_stubs.py and test_docs.py (one process),
# test_distributed.py and test_demo.py (4 processes, gloo), test_cuda.py (CUDA tensors: skipped without a
# GPU or a CUDA build), test_elastic.py (3 processes over trickle.Elastic,
# one killed with SIGKILL and restarted), test_peer_failure.py (2 processes, one leaves)
# the examples examples/python/train.py and train_gpt.py (4 workers, each algorithm, and
# train_gpt.py's dense baseline --algo ddp), examples/python/elastic.py (a supervisor that
# restarts a killed worker), and the network lab's short mode
# (scripts/wan_lab.sh --short: 2 workers in network namespaces; skipped without root).
#
#   tests/python/run.sh                 # build if needed, then run everything
#   tests/python/run.sh --no-example    # skip the example runs
#   tests/python/run.sh --build-only    # only build / check the installation
#
# test_distributed.py and the examples run under torchrun; test_peer_failure.py under
# tests/python/launch.py, which lets one worker leave on purpose.
# Environment: TRICKLE_PYTHON (default /usr/bin/python3: a Python with torch; Debian's
# python3-torch), TRICKLE_VENV (default build/pyenv), MAX_JOBS (parallel compiles, default 1),
# TRICKLE_BUILD_DIR (where setuptools builds; default $TRICKLE_VENV/trickle-build).
# The build is skipped when the sources, the trickle headers and torch are unchanged since
# the last successful one (a stamp in the venv). It writes nothing into python/ (the
# script fails if it finds a build output there). As root on Debian, missing packages are
# installed with apt-get (ninja-build too); otherwise they are named and the script stops.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${TRICKLE_PYTHON:-/usr/bin/python3}
VENV=${TRICKLE_VENV:-$ROOT/build/pyenv}
NPROC=4
RUN_EXAMPLE=1
BUILD_ONLY=0
for a in "$@"; do
    case "$a" in
        --no-example) RUN_EXAMPLE=0 ;;
        --build-only) BUILD_ONLY=1 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "run.sh: unknown option $a (see --help)" >&2; exit 2 ;;
    esac
done

say() { printf '\n== %s\n' "$*"; }
die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }

# ---- 1. A Python with torch, venv, pip, setuptools, wheel, headers and a C++ compiler ----
# (Debian: python3-torch libtorch-dev libgloo-dev pybind11-dev python3-dev python3-venv
# python3-pip python3-setuptools python3-wheel g++, and ninja-build, optional.)
[ -x "$PY" ] || die "no Python at $PY (set TRICKLE_PYTHON to a Python that has torch)"
missing=()
"$PY" -c 'import torch' 2>/dev/null || missing+=(python3-torch libtorch-dev)
"$PY" -c 'import torch.utils.cpp_extension as c, os; assert os.path.isfile(os.path.join(c.include_paths()[0], "torch", "extension.h"))' 2>/dev/null \
    || missing+=(libtorch-dev)
"$PY" -c 'import torch.utils.cpp_extension as c, os; assert any(os.path.isfile(os.path.join(p, "pybind11", "pybind11.h")) for p in c.include_paths() + ["/usr/include"])' 2>/dev/null \
    || missing+=(pybind11-dev)
# The extension includes c10d's ProcessGroupGloo.hpp (comm::elastic_group), which includes Gloo's headers.
"$PY" -c 'import torch.utils.cpp_extension as c, os; assert any(os.path.isfile(os.path.join(p, "gloo", "rendezvous", "store.h")) for p in c.include_paths() + ["/usr/include"])' 2>/dev/null \
    || missing+=(libgloo-dev)
"$PY" -c 'import setuptools' 2>/dev/null || missing+=(python3-setuptools)
"$PY" -c 'import wheel' 2>/dev/null || missing+=(python3-wheel)
"$PY" -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
"$PY" -c 'import pip' 2>/dev/null || missing+=(python3-pip)
"$PY" -c 'import sysconfig, os; assert os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null \
    || missing+=(python3-dev)
command -v g++ >/dev/null || missing+=(g++)
# ninja is optional (it makes rebuilds incremental): as root it is installed with the rest, otherwise only noted.
if ! command -v ninja >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && [ "$PY" = /usr/bin/python3 ]; then
    missing+=(ninja-build)
fi
if [ ${#missing[@]} -gt 0 ]; then
    pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && [ "$PY" = /usr/bin/python3 ]; then
        say "installing missing Debian packages: $pkgs"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs
    else
        die "missing: $pkgs(Debian: apt-get install $pkgs; or set TRICKLE_PYTHON to a Python with torch, setuptools, wheel and pip)"
    fi
fi
command -v ninja >/dev/null || echo "note: ninja not found (Debian: ninja-build); the extension builds without it, but rebuilds everything each time"

# ---- 2. The virtual environment (sees the system's torch) ----
if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV (with the system site packages, for torch)"
    "$PY" -m venv --system-site-packages "$VENV"
fi
VPY="$VENV/bin/python"

# ---- 3. Build and install the package when something changed ----
stamp_now=$("$VPY" - "$ROOT" <<'EOF'
import hashlib, os, pathlib, sys, torch
root = pathlib.Path(sys.argv[1])
h = hashlib.sha256()
h.update(f"{torch.__version__} {torch.__file__} {sys.version}".encode())
# What setup.py reads from the environment (CUDA or not, which nvcc, which archs).
for var in ("TRICKLE_CUDA", "CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST"):
    h.update(f"{var}={os.environ.get(var, '')}".encode())
files = [root / "python" / f for f in ("setup.py", "pyproject.toml", "MANIFEST.in")]
files += sorted((root / "python" / "csrc").glob("*"))
files += sorted(f for f in (root / "python" / "trickle").glob("*") if f.suffix in (".py", ".pyi") or f.name == "py.typed")
files += sorted((root / "include").rglob("*.hpp"))
for f in files:
    h.update(str(f.relative_to(root)).encode())
    h.update(f.read_bytes())
print(h.hexdigest())
EOF
)
stamp_file="$VENV/.trickle-build-stamp"
if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp_now" ] && (cd /tmp && "$VPY" -c 'import trickle') 2>/dev/null; then
    say "trickle is installed and up to date in $VENV (no build)"
else
    say "building and installing python/ into $VENV (MAX_JOBS=${MAX_JOBS:-1}; a full build takes a few minutes)"
    rm -f "$stamp_file"
    t0=$(date +%s)
    log="$VENV/trickle-build.log"
    # The build directory (objects, build/lib, egg-info) outside the source tree: python/ stays
    # as checked out (python/setup.py honours TRICKLE_BUILD_DIR; a read-only checkout builds).
    export TRICKLE_BUILD_DIR=${TRICKLE_BUILD_DIR:-$VENV/trickle-build}
    marker="$VENV/.trickle-build-started"
    touch "$marker"
    if ! MAX_JOBS=${MAX_JOBS:-1} "$VENV/bin/pip" install --no-build-isolation --no-deps --no-index -v "$ROOT/python" >"$log" 2>&1; then
        grep -E 'error|Error' "$log" | head -40 >&2 || true
        die "the build failed; full log: $log"
    fi
    echo "built in $(( $(date +%s) - t0 )) s in $TRICKLE_BUILD_DIR (log: $log)"
    # Build outputs written into python/ during the build: files git ignores (sources edited
    # meanwhile are not ignored). Outside a git checkout the check finds nothing.
    written=$(cd "$ROOT" && find python -newer "$marker" -type f 2>/dev/null | { git check-ignore --stdin 2>/dev/null || true; } | head -5)
    [ -z "$written" ] || die "the build wrote into the source tree python/ (it must not): $(echo $written)"
    echo "$stamp_now" >"$stamp_file"
fi
(cd /tmp && "$VPY" -c 'import trickle, torch; print("trickle", trickle.__version__, "at", trickle.__file__, "| torch", torch.__version__)')
[ "$BUILD_ONLY" = 1 ] && exit 0

# ---- 4. Tests ----
failed=()
run() { # name, command...
    local name=$1; shift
    say "$name"
    local t0=$SECONDS
    if "$@"; then
        echo "-- $name: passed ($(( SECONDS - t0 )) s)"
    else
        echo "-- $name: FAILED (exit $?, $(( SECONDS - t0 )) s)"
        failed+=("$name")
    fi
}
cd "$ROOT"
# torchrun itself, as users launch: python -m torch.distributed.run is torchrun. Debian's
# torch 1.13 under Python 3.11 fails in torchrun's default output handling (an enum that
# changed in 3.11); --redirects 2 --tee 2 avoids that code path and changes nothing else.
torchrun=("$VPY" -m torch.distributed.run --standalone --nproc_per_node "$NPROC")
if "$VPY" -c 'import sys, torch; sys.exit(0 if torch.__version__.startswith("1.") else 1)'; then
    torchrun+=(--redirects 2 --tee 2)
fi
run "test_local (1 process)" timeout 300 "$VPY" tests/python/test_local.py
run "test_registry (1 process)" timeout 300 "$VPY" tests/python/test_registry.py
run "test_stubs (1 process: the type stubs against the runtime)" timeout 300 "$VPY" tests/python/test_stubs.py
run "test_docs (1 process: docs/python-api.md's options and signatures against the classes)" timeout 300 "$VPY" tests/python/test_docs.py
run "test_distributed (torchrun, $NPROC processes, gloo)" timeout 600 "${torchrun[@]}" tests/python/test_distributed.py
run "test_demo (torchrun, $NPROC processes, gloo: trickle.DeMo)" timeout 300 "${torchrun[@]}" tests/python/test_demo.py
run "test_elastic (3 worker processes over trickle.Elastic, one killed and restarted)" \
    timeout 300 "$VPY" tests/python/test_elastic.py
# CUDA tensors against the CPU path: runs where there is a GPU and a CUDA build, and says
# why it skips elsewhere (scripts/gpu_check.sh runs it on a GPU, over Gloo and NCCL).
run "test_cuda (torchrun, $NPROC processes on one GPU, gloo; skipped without a GPU or a CUDA build)" \
    timeout 300 "${torchrun[@]}" tests/python/test_cuda.py
if ! "$VPY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    # No GPU: the same test script with both copies on the CPU, a check of the script itself.
    run "test_cuda, dry run on the CPU (torchrun, $NPROC processes, gloo)" \
        env TRICKLE_TEST_DRY_RUN=1 timeout 300 "${torchrun[@]}" tests/python/test_cuda.py
fi
run "test_peer_failure (2 processes, one leaves)" \
    "$VPY" tests/python/launch.py --nproc 2 --timeout 120 tests/python/test_peer_failure.py
if [ "$RUN_EXAMPLE" = 1 ]; then
    for algo in sparta diloco sparta-diloco; do
        run "example train.py --algo $algo (torchrun, $NPROC workers)" \
            timeout 120 "${torchrun[@]}" examples/python/train.py --steps 200 --algo $algo
    done
    for algo in sparta diloco sparta-diloco ddp demo; do
        run "example train_gpt.py --algo $algo (torchrun, $NPROC workers, a small GPT)" \
            timeout 120 "${torchrun[@]}" examples/python/train_gpt.py --steps 60 --log-every 20 --algo $algo
    done
    # The restart pattern: a supervisor that restarts a killed worker with its id (SPARTA +
    # DiLoCo here; test_elastic.py kills and restarts a worker of each algorithm).
    run "example elastic.py --algo sparta-diloco (3 workers, a supervisor restarts the one killed)" \
        timeout 180 "$VPY" examples/python/elastic.py --algo sparta-diloco --steps 600 --kill 1@40
    # The network lab's short mode: 2 worker processes in network namespaces on 50 Mb/s
    # links (scripts/wan_lab.sh). As root where namespaces can be made; it says why it
    # skips (exit 77) elsewhere, which is not a failure.
    lab_short() {
        timeout 300 bash scripts/wan_lab.sh --short --python "$VPY" --out "$VENV/wan_lab_short"
        local rc=$?
        [ "$rc" = 77 ] && return 0
        return "$rc"
    }
    run "scripts/wan_lab.sh --short (2 workers in network namespaces, 50 Mb/s links, sparta and ddp)" lab_short
fi

if [ ${#failed[@]} -gt 0 ]; then
    say "FAILED: ${failed[*]}"
    exit 1
fi
say "all Python tests passed"
