"""trickle.Elastic: where an elastic worker (trickle.SPARTA, DiLoCo or SPARTADiLoCo with
elastic=) finds its view, and trickle.connect_store.

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
import io
import numbers
from collections.abc import Mapping

import torch
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
    """An elastic worker's place (trickle.SPARTA, DiLoCo or SPARTADiLoCo with elastic=): the
    store holding the view, this worker's stable id (>= 0), how many workers form the first
    epoch (ids 0 .. initial-1, the same on every worker), the timeout in seconds (how long a
    collective waits for a peer and a renewal for the view's members), the job name (a
    prefix of the store's keys), and liveness in seconds (0: off; otherwise each worker
    beats a counter in the store and a renewal stops waiting for a member whose counter has
    not moved for that long, so a killed worker is dropped after about `liveness` rather
    than the timeout; needs a TCPStore; a process started with the id of a live worker is
    then refused with ValueError).

    Every other wait is bounded too: `start_timeout` (seconds, default 300), how long the
    first members wait for each other before the first epoch (then CommError naming the ids
    that never started); `join_timeout` (default 600), how long a joiner waits to be
    admitted (the members admit it at their next round: an outer step, or a SPARTA
    exchange; then CommError). `hostname`: the address Gloo listens on, which the other
    machines must reach ("" : this machine's hostname). `renew_every` (default 1): the
    members renew the view through the store at every k-th round only (the same k on every
    worker, else MismatchError), so SPARTA, whose every exchange is a round, pays the
    store's round trips once every k exchanges; a failure is still caught at once (the
    round is rolled back and the next renewal is a real one), but a joiner waits up to k
    rounds to be admitted. `store_recovery` (seconds, default 0: off): how long a worker
    whose store failed waits for a store at the same address (a supervisor restarting
    `python3 -m trickle.store`); the workers then write back the view and go on without a
    lost round or worker. 0: a failed store ends the job (CommError naming it). Set it on
    every worker; needs a TCPStore.

    `carry`: the trainer's own state that a joiner takes from a live worker together with
    the algorithm's (None: nothing): an object with state_dict() and load_state_dict(), such
    as the torch.optim optimizer (its moments), a learning-rate scheduler, or a mapping of
    names to such objects. The donor's state_dict() travels (torch.save'd) and the joiner
    loads it before its first step, so its optimizer resumes with the members' moments
    instead of zeros. Pass the same kind of object on every worker: a joiner that carries
    another (the class names are compared), or none where the members carry one, is
    refused, naming both.

    A process whose id is below `initial` and that is the first with that id is a member
    from the start; any other process (a new id, or a restart) joins at the members' next
    round. After a worker is dropped (its algorithm object raised CommError), it rejoins by
    building the algorithm again with the same id; nothing rejoins by itself. Shard the
    data by id, not by rank: ranks change with the view."""

    def __init__(self, store, id: int, initial: int, timeout: float = 10.0, job: str = "trickle",
                 liveness: float = 0.0, start_timeout: float = 300.0, join_timeout: float = 600.0,
                 hostname: str = "", carry=None, renew_every: int = 1, store_recovery: float = 0.0):
        """Checks the arguments (TypeError / ValueError) and keeps them."""
        if not isinstance(store, dist.Store):
            raise TypeError(f"trickle.Elastic: store must be a torch.distributed.Store (e.g. trickle.connect_store("
                            f"host, port)), got {type(store).__name__}")
        for name, v, lo in (("id", id, 0), ("initial", initial, 1), ("renew_every", renew_every, 1)):
            if not isinstance(v, numbers.Integral) or isinstance(v, bool):
                raise TypeError(f"trickle.Elastic: {name} must be an integer, got {type(v).__name__}")
            if v < lo:
                raise ValueError(f"trickle.Elastic: {name} must be >= {lo}, got {v}")
        if not isinstance(timeout, numbers.Real) or isinstance(timeout, bool) or not timeout > 0:
            raise ValueError(f"trickle.Elastic: timeout must be > 0 seconds (a dead peer must never hang the "
                             f"others), got {timeout!r}")
        if not isinstance(liveness, numbers.Real) or isinstance(liveness, bool) or not 0 <= liveness <= timeout:
            raise ValueError(f"trickle.Elastic: liveness must be in [0, timeout] seconds (0: off), got {liveness!r}")
        if not isinstance(store_recovery, numbers.Real) or isinstance(store_recovery, bool) or not store_recovery >= 0:
            raise ValueError(f"trickle.Elastic: store_recovery must be >= 0 seconds (0: off), got {store_recovery!r}")
        for name, v in (("start_timeout", start_timeout), ("join_timeout", join_timeout)):
            if not isinstance(v, numbers.Real) or isinstance(v, bool) or not v > 0:
                raise ValueError(f"trickle.Elastic: {name} must be > 0 seconds, got {v!r}")
        if not isinstance(hostname, str):
            raise TypeError(f"trickle.Elastic: hostname must be a string, got {type(hostname).__name__}")
        if not isinstance(job, str) or not job or "/" in job:
            raise ValueError(f"trickle.Elastic: job must be a non-empty name without '/', got {job!r}")
        _carried(carry)  # checks it
        self.store = store
        self.id = int(id)
        self.initial = int(initial)
        self.timeout = float(timeout)
        self.job = job
        self.liveness = float(liveness)
        self.start_timeout = float(start_timeout)
        self.join_timeout = float(join_timeout)
        self.hostname = hostname
        self.carry = carry
        self.renew_every = int(renew_every)
        self.store_recovery = float(store_recovery)

    def __repr__(self):
        return (f"trickle.Elastic(id={self.id}, initial={self.initial}, timeout={self.timeout}, job={self.job!r}, "
                f"liveness={self.liveness}, start_timeout={self.start_timeout}, join_timeout={self.join_timeout}, "
                f"hostname={self.hostname!r}, carry={_carried(self.carry)[0] or None!r}, "
                f"renew_every={self.renew_every}, store_recovery={self.store_recovery})")


def _stateful(obj) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def _carried(carry):
    """(name, save, load) of Elastic's `carry`: the name the members compare (class names,
    with their keys for a mapping), save() -> bytes on the donor, load(bytes) on a joiner;
    ("", None, None) for None. Raises TypeError for anything else."""
    if carry is None:
        return "", None, None
    if isinstance(carry, Mapping):
        items = list(carry.items())
        if not items or not all(isinstance(k, str) and k for k, _ in items):
            raise TypeError("trickle.Elastic: carry, as a mapping, must map non-empty names to objects with "
                            "state_dict() and load_state_dict()")
    else:
        items = [("", carry)]
    for k, obj in items:
        if not _stateful(obj):
            raise TypeError(f"trickle.Elastic: carry{'[' + repr(k) + ']' if k else ''} must have state_dict() and "
                            f"load_state_dict() (a torch.optim optimizer, an lr scheduler, ...), got "
                            f"{type(obj).__name__}")
    name = ",".join((f"{k}=" if k else "") + f"{type(o).__module__}.{type(o).__qualname__}" for k, o in items)

    def save() -> bytes:
        buf = io.BytesIO()
        torch.save({k: o.state_dict() for k, o in items}, buf)
        return buf.getvalue()

    def load(data: bytes) -> None:
        state = torch.load(io.BytesIO(data))
        for k, o in items:
            o.load_state_dict(state[k])

    return name, save, load
