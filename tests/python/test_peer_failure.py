"""A worker that leaves mid-training makes the others' step() raise trickle.CommError.

    build/pyenv/bin/python tests/python/launch.py --nproc 2 tests/python/test_peer_failure.py

Rank 1 exits after two steps; rank 0's next step must raise trickle.CommError (a
RuntimeError) naming the operation and the backend, promptly rather than at the group's
timeout. Exits 0 on success on every rank (os._exit: the group is broken, so no orderly
shutdown is attempted).
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import trickle


def main() -> int:
    if "RANK" not in os.environ:
        print("run with tests/python/launch.py --nproc 2 (or torchrun --nproc_per_node 2)", file=sys.stderr)
        return 2
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    model = torch.nn.Linear(64, 64)
    sparta = trickle.SPARTA(model, fraction=0.5)
    for _ in range(2):
        sparta.step()
    if rank == 1:
        sys.stdout.flush()
        os._exit(0)  # leaves without a word
    time.sleep(0.5)
    t0 = time.time()
    try:
        sparta.step()
    except trickle.CommError as e:
        ok = isinstance(e, RuntimeError) and "process_group" in str(e)
        print(f"test_peer_failure: {'ok' if ok else 'FAIL'}: CommError after {time.time() - t0:.1f} s: {e}", flush=True)
        os._exit(0 if ok else 1)
    except Exception as e:  # noqa: BLE001
        print(f"test_peer_failure: FAIL: expected trickle.CommError, got {type(e).__name__}: {e}", flush=True)
        os._exit(1)
    print("test_peer_failure: FAIL: step() returned although rank 1 left", flush=True)
    os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
