"""A tiny pytest-free test runner for trickle's Python tests (single- and multi-process).

Every test is a function; `run(tests)` calls each in order on every rank, catches what it
raises, then lets the ranks agree on the outcome (an all-reduce of the failure flags), so
all ranks print the same verdict and exit with the same status. A test must make the same
collective calls on every rank up to its checks: assertions come after the collectives.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Callable, List, Sequence

import torch
import torch.distributed as dist


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def log(msg: str) -> None:
    if rank() == 0:
        print(msg, flush=True)


def expect_raises(exc_types, fn: Callable, *contains: str):
    """Calls fn; returns the exception it raised. Fails unless it is one of exc_types and its
    message holds every string of `contains` (case-insensitive)."""
    try:
        fn()
    except exc_types as e:  # noqa: B902
        msg = str(e).lower()
        missing = [c for c in contains if c.lower() not in msg]
        assert not missing, f"{type(e).__name__} message lacks {missing}: {e}"
        return e
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"expected {exc_types}, got {type(e).__name__}: {e}") from e
    raise AssertionError(f"expected {exc_types}, nothing was raised")


def flat(params) -> torch.Tensor:
    """All parameters as one float32 vector (a copy)."""
    return torch.cat([p.detach().reshape(-1).float() for p in params])


def bits(t: torch.Tensor) -> torch.Tensor:
    """The bit patterns of a float32 tensor, as int32 (NaN-safe equality)."""
    return t.detach().contiguous().float().view(torch.int32)


def gather(t: torch.Tensor) -> List[torch.Tensor]:
    out = [torch.empty_like(t) for _ in range(world())]
    dist.all_gather(out, t.contiguous())
    return out


def run(tests: Sequence[Callable], title: str) -> int:
    """Runs the tests; returns the process exit status (0 when all passed on every rank)."""
    only = os.environ.get("TRICKLE_TEST_ONLY")
    failed: List[str] = []
    start = time.time()
    for t in tests:
        if only and only not in t.__name__:
            continue
        t0 = time.time()
        err = None
        try:
            t()
        except Exception:  # noqa: BLE001
            err = traceback.format_exc()
        flag = torch.tensor([1 if err else 0], dtype=torch.int64)
        if dist.is_initialized() and world() > 1:
            dist.all_reduce(flag)
        if err:
            print(f"[rank {rank()}] FAIL {t.__name__}:\n{err}", file=sys.stderr, flush=True)
        if int(flag.item()):
            failed.append(t.__name__)
            log(f"  FAIL  {t.__name__} ({time.time() - t0:.2f} s; failed on {int(flag.item())} rank(s))")
        else:
            log(f"  ok    {t.__name__} ({time.time() - t0:.2f} s)")
    log(
        f"{title}: {'FAILED ' + ', '.join(failed) if failed else 'all passed'} "
        f"({time.time() - start:.1f} s, {world()} rank(s))"
    )
    return 1 if failed else 0
