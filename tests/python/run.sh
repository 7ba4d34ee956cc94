#!/usr/bin/env bash
# tests/python/run.sh: builds trickle's Python package (python/) into a virtual environment
# and runs its tests: tests/python/test_local.py and test_registry.py (one process),
# test_distributed.py (4 processes, gloo), test_elastic.py (3 processes over trickle.Elastic,
# one killed with SIGKILL and restarted), test_peer_failure.py (2 processes, one leaves)
# and the example examples/python/train.py (4 workers, each algorithm).
#
#   tests/python/run.sh                 # build if needed, then run everything
#   tests/python/run.sh --no-example    # skip the example runs
#   tests/python/run.sh --build-only    # only build / check the installation
#
# test_distributed.py and the example run under torchrun; test_peer_failure.py under
# tests/python/launch.py, which lets one worker leave on purpose.
# Environment: TRICKLE_PYTHON (default /usr/bin/python3: a Python with torch; Debian's
# python3-torch), TRICKLE_VENV (default build/pyenv), MAX_JOBS (parallel compiles, default 1).
# The build is skipped when the sources, the trickle headers and torch are unchanged since
# the last successful one (a stamp in the venv). As root on Debian, missing packages are
# installed with apt-get; otherwise they are named and the script stops.
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
[ -x "$PY" ] || die "no Python at $PY (set TRICKLE_PYTHON to a Python that has torch)"
missing=()
"$PY" -c 'import torch' 2>/dev/null || missing+=(python3-torch libtorch-dev)
"$PY" -c 'import torch.utils.cpp_extension as c, os; assert os.path.isfile(os.path.join(c.include_paths()[0], "torch", "extension.h"))' 2>/dev/null \
    || missing+=(libtorch-dev)
"$PY" -c 'import torch.utils.cpp_extension as c, os; assert any(os.path.isfile(os.path.join(p, "pybind11", "pybind11.h")) for p in c.include_paths() + ["/usr/include"])' 2>/dev/null \
    || missing+=(pybind11-dev)
"$PY" -c 'import setuptools' 2>/dev/null || missing+=(python3-setuptools)
"$PY" -c 'import wheel' 2>/dev/null || missing+=(python3-wheel)
"$PY" -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
"$PY" -c 'import pip' 2>/dev/null || missing+=(python3-pip)
"$PY" -c 'import sysconfig, os; assert os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null \
    || missing+=(python3-dev)
command -v g++ >/dev/null || missing+=(g++)
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
import hashlib, pathlib, sys, torch
root = pathlib.Path(sys.argv[1])
h = hashlib.sha256()
h.update(f"{torch.__version__} {torch.__file__} {sys.version}".encode())
files = [root / "python" / f for f in ("setup.py", "pyproject.toml")]
files += sorted((root / "python" / "csrc").glob("*")) + sorted((root / "python" / "trickle").glob("*.py"))
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
    if ! MAX_JOBS=${MAX_JOBS:-1} "$VENV/bin/pip" install --no-build-isolation --no-deps --no-index -v "$ROOT/python" >"$log" 2>&1; then
        grep -E 'error|Error' "$log" | head -40 >&2 || true
        die "the build failed; full log: $log"
    fi
    echo "built in $(( $(date +%s) - t0 )) s (log: $log)"
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
run "test_distributed (torchrun, $NPROC processes, gloo)" timeout 600 "${torchrun[@]}" tests/python/test_distributed.py
run "test_elastic (3 worker processes over trickle.Elastic, one killed and restarted)" \
    timeout 300 "$VPY" tests/python/test_elastic.py
run "test_peer_failure (2 processes, one leaves)" \
    "$VPY" tests/python/launch.py --nproc 2 --timeout 120 tests/python/test_peer_failure.py
if [ "$RUN_EXAMPLE" = 1 ]; then
    for algo in sparta diloco sparta-diloco; do
        run "example train.py --algo $algo (torchrun, $NPROC workers)" \
            timeout 120 "${torchrun[@]}" examples/python/train.py --steps 200 --algo $algo
    done
fi

if [ ${#failed[@]} -gt 0 ]; then
    say "FAILED: ${failed[*]}"
    exit 1
fi
say "all Python tests passed"
