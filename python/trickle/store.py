"""python3 -m trickle.store --port P: serves the TCPStore an elastic job keeps its view in,
as a process of its own that outlives every worker (until SIGINT or SIGTERM).

    python3 -m trickle.store --port 29600
    python3 -m trickle.store --port 0      # any free port; the first line printed names it
"""

from __future__ import annotations

import argparse
import datetime
import signal
import sys
import threading


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m trickle.store", description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=29600, help="the port to serve on (0: any free one)")
    p.add_argument("--host", default="0.0.0.0", help="unused by TCPStore's server, kept for symmetry")
    args = p.parse_args(argv)
    if not 0 <= args.port < 65536:
        p.error(f"--port must be in [0, 65535], got {args.port}")
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", args.port, is_master=True, timeout=datetime.timedelta(seconds=30),
                          wait_for_workers=False)
    print(f"trickle.store: serving on port {store.port}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: done.set())
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    while not done.wait(0.2):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
