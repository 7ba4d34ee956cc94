"""trickle.Elastic: where an elastic DiLoCo worker finds its view, and trickle.connect_store.

An elastic worker is one process with a stable id. The view (which workers take part, in
which epoch) lives in a torch.distributed store that outlives every worker: a TCPStore
served by `python3 -m trickle.store --port P` (or by the C++ `trickle-store`, or by any
process that keeps a TCPStore server alive). Each epoch's collectives run over a Gloo
process group made for that epoch (trickle/torch/elastic_group.hpp). A worker killed with
SIGKILL is dropped by the survivors within the timeout; started again with the same id,
it joins, receives the state from a live worker (hash-checked) and trains on.

    store = trickle.connect_store("10.0.0.1", 29600)
    diloco = trickle.DiLoCo(model, interval=500,
                            elastic=trickle.Elastic(store, id=rank, initial=4, timeout=10.0))
"""

from __future__ import annotations

import datetime
import numbers

import torch.distributed as dist

from ._errors import CommError


def connect_store(host: str, port: int, timeout: float = 30.0) -> "dist.Store":
    """A client of the TCPStore at host:port; raises trickle.CommError (a RuntimeError) naming
    the address when no store answers within `timeout` seconds."""
    if not isinstance(host, str) or not host:
        raise TypeError(f"trickle.connect_store: host must be a non-empty string, got {host!r}")
    if not isinstance(port, numbers.Integral) or isinstance(port, bool) or not 0 < port < 65536:
        raise ValueError(f"trickle.connect_store: port must be an integer in [1, 65535], got {port!r}")
    if not isinstance(timeout, numbers.Real) or not timeout > 0:
        raise ValueError(f"trickle.connect_store: timeout must be > 0 seconds, got {timeout!r}")
    try:
        return dist.TCPStore(host, int(port), is_master=False, timeout=datetime.timedelta(seconds=float(timeout)),
                             wait_for_workers=False)
    except (RuntimeError, OSError) as e:
        raise CommError(
            f"trickle.connect_store: no store answered at {host}:{port} within {timeout} s "
            f"(start one: python3 -m trickle.store --port {port}): {e}"
        ) from None


class Elastic:
    """An elastic DiLoCo worker's place: the store holding the view, this worker's stable
    id (>= 0), how many workers form the first epoch (ids 0 .. initial-1, the same on every
    worker), the timeout in seconds (how long a collective waits for a peer and a renewal
    for the view's members), the job name (a prefix of the store's keys), and liveness in
    seconds (0: off; otherwise each worker beats a counter in the store and a renewal stops
    waiting for a member whose counter has not moved for that long, so a killed worker is
    dropped after about `liveness` rather than the timeout; needs a TCPStore; a process
    started with the id of a live worker is then refused with ValueError).

    Every other wait is bounded too: `start_timeout` (seconds, default 300), how long the
    first members wait for each other before the first epoch (then CommError naming the ids
    that never started); `join_timeout` (default 600), how long a joiner waits to be
    admitted (the members admit it at their next outer step; then CommError). `hostname`:
    the address Gloo listens on, which the other machines must reach ("" : this machine's
    hostname).

    A process whose id is below `initial` and that is the first with that id is a member
    from the start; any other process (a new id, or a restart) joins at the members' next
    outer step. After a worker is dropped (its DiLoCo object raised CommError), it rejoins
    by building a new DiLoCo with the same id; nothing rejoins by itself. Shard the data by
    id, not by rank: ranks change with the view."""

    def __init__(self, store, id: int, initial: int, timeout: float = 10.0, job: str = "trickle",
                 liveness: float = 0.0, start_timeout: float = 300.0, join_timeout: float = 600.0,
                 hostname: str = ""):
        """Checks the arguments (TypeError / ValueError) and keeps them."""
        if not isinstance(store, dist.Store):
            raise TypeError(f"trickle.Elastic: store must be a torch.distributed.Store (e.g. trickle.connect_store("
                            f"host, port)), got {type(store).__name__}")
        for name, v, lo in (("id", id, 0), ("initial", initial, 1)):
            if not isinstance(v, numbers.Integral) or isinstance(v, bool):
                raise TypeError(f"trickle.Elastic: {name} must be an integer, got {type(v).__name__}")
            if v < lo:
                raise ValueError(f"trickle.Elastic: {name} must be >= {lo}, got {v}")
        if not isinstance(timeout, numbers.Real) or isinstance(timeout, bool) or not timeout > 0:
            raise ValueError(f"trickle.Elastic: timeout must be > 0 seconds (a dead peer must never hang the "
                             f"others), got {timeout!r}")
        if not isinstance(liveness, numbers.Real) or isinstance(liveness, bool) or not 0 <= liveness <= timeout:
            raise ValueError(f"trickle.Elastic: liveness must be in [0, timeout] seconds (0: off), got {liveness!r}")
        for name, v in (("start_timeout", start_timeout), ("join_timeout", join_timeout)):
            if not isinstance(v, numbers.Real) or isinstance(v, bool) or not v > 0:
                raise ValueError(f"trickle.Elastic: {name} must be > 0 seconds, got {v!r}")
        if not isinstance(hostname, str):
            raise TypeError(f"trickle.Elastic: hostname must be a string, got {type(hostname).__name__}")
        if not isinstance(job, str) or not job or "/" in job:
            raise ValueError(f"trickle.Elastic: job must be a non-empty name without '/', got {job!r}")
        self.store = store
        self.id = int(id)
        self.initial = int(initial)
        self.timeout = float(timeout)
        self.job = job
        self.liveness = float(liveness)
        self.start_timeout = float(start_timeout)
        self.join_timeout = float(join_timeout)
        self.hostname = hostname

    def __repr__(self):
        return (f"trickle.Elastic(id={self.id}, initial={self.initial}, timeout={self.timeout}, job={self.job!r}, "
                f"liveness={self.liveness}, start_timeout={self.start_timeout}, join_timeout={self.join_timeout}, "
                f"hostname={self.hostname!r})")
