"""A minimal stand-in for torchrun --standalone: starts N copies of a script on this machine.

    python tests/python/launch.py --nproc 4 tests/python/test_distributed.py [args...]

Each copy gets the environment torchrun gives (RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so the script's
torch.distributed.init_process_group("gloo") works unchanged. Why it exists: Debian 12's
torch 1.13 under Python 3.11 cannot start torchrun with its default options (its
elastic Std.from_str("0") returns None there; `--redirects 2 --tee 2` works around it).
Exits with the first non-zero exit status of the copies; if a copy fails, the others get
`--grace` seconds to finish before they are terminated, and all are terminated after
`--timeout` seconds.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds before every copy is terminated")
    ap.add_argument("--grace", type=float, default=30.0, help="seconds the others get after one copy failed")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()

    port = free_port()
    procs = []
    for r in range(a.nproc):
        env = dict(os.environ)
        env.update(
            RANK=str(r),
            LOCAL_RANK=str(r),
            WORLD_SIZE=str(a.nproc),
            LOCAL_WORLD_SIZE=str(a.nproc),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
        )
        procs.append(subprocess.Popen([sys.executable, a.script, *a.args], env=env))

    start = time.time()
    failed_at = None
    status = 0
    while True:
        codes = [p.poll() for p in procs]
        bad = [c for c in codes if c not in (None, 0)]
        if bad and failed_at is None:
            failed_at = time.time()
            status = bad[0]
        if all(c is not None for c in codes):
            break
        now = time.time()
        if now - start > a.timeout or (failed_at is not None and now - failed_at > a.grace):
            why = "timed out" if now - start > a.timeout else "another copy failed"
            print(f"launch.py: terminating the remaining copies ({why})", file=sys.stderr, flush=True)
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            status = status or 124
            break
        time.sleep(0.05)
    return status


if __name__ == "__main__":
    sys.exit(main())
