"""trickle.DeMo: Decoupled Momentum Optimization as a torch.optim.Optimizer.

The engine is the C++ library's trickle::demo_engine (include/trickle/algorithm/demo.hpp),
one per parameter group, over a torch.distributed process group: every step each worker
adds its gradient to its own momentum, sends the k largest DCT coefficients of each chunk
of it (or k shared-seed ones: selection="shared"), and every worker applies the sign of the
same decoded mean. No gradient all-reduce: use it without DistributedDataParallel (or under
no_sync()). docs/demo.md has the method, its options and its measured costs.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch
import torch.distributed as dist

from . import _C
from ._algorithms import CODECS, _as_bytes, _resolve_group
from ._stats import Stats

SELECTIONS = tuple(_C.demo_selections)  # the C++ engine's demo_select names

# The hyperparameters a parameter group may set (torch.optim's defaults dict).
_GROUP_KEYS = ("lr", "compression_decay", "weight_decay", "chunk", "k")
# Those fixed once an engine is built: only lr may change afterwards (a schedule).
_FIXED_KEYS = ("compression_decay", "weight_decay", "chunk", "k")
_STATE_KEY = "trickle_demo"


def _shape(p: torch.Tensor) -> Tuple[int, int]:
    """How DeMo chunks a tensor: a vector (1 x n: chunks of `chunk` values) for 0-D and 1-D
    tensors, a matrix (dim 0 x the rest: chunk x chunk tiles) otherwise."""
    if p.dim() < 2 or p.numel() == 0:
        return (1, p.numel())
    return (p.shape[0], p.numel() // p.shape[0])


def _root_of(group) -> int:
    """The global rank of the group's rank 0."""
    if group is dist.distributed_c10d._get_default_group():
        return 0
    return dist.distributed_c10d._get_global_rank(group, 0)


def _check_number(name: str, v: Any, integer: bool = False) -> None:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral if integer else numbers.Real):
        raise TypeError(f"trickle.DeMo: {name} must be {'an int' if integer else 'a number'}, got {type(v).__name__}")


class DeMo(torch.optim.Optimizer):
    """DeMo (Peng, Quesnelle, Kingma, 2024) over a torch.distributed group, as an optimizer.

        dist.init_process_group("gloo")
        opt = trickle.DeMo(model.parameters(), lr=3e-4, k=32, chunk=64)
        loss.backward(); opt.step(); opt.zero_grad()

    Per step and parameter: m <- compression_decay * m + grad; the k largest DCT-II
    coefficients of each chunk of m (1-D chunks of `chunk` values for vectors, chunk x chunk
    tiles for matrices, a tensor of more dimensions as dim 0 x the rest) leave m and are
    exchanged; p <- p - lr * (sign(mean of the decoded coefficients) + weight_decay * p).
    Replicas that start equal stay equal, bit for bit.

    Arguments (lr, compression_decay, weight_decay, chunk and k per parameter group too):
      lr=1e-3                 step size of the sign update (> 0); a scheduler may change it
      compression_decay=0.999 the momentum's decay beta, in [0, 1]
      weight_decay=0.0        decoupled weight decay (>= 0)
      chunk=64                chunk size s, in [1, 256]
      k=32                    coefficients sent per chunk, in [1, s * s] (vectors: min(k, s))
      selection="top_k"       "top_k": each worker's own largest (DeMo as published; indices
                              and values all-gathered), "shared": k per chunk chosen by the
                              shared seed (no indices; the values summed by an all-reduce)
      values="fp32"           the values' codec (trickle.CODECS: "bf16", "sign2", ...)
      codec_block=32          values per scale, for the block codecs
      seed=0                  the shared seed (selection="shared")
      broadcast_initial=True  at construction (and add_param_group), give every worker the
                              group's rank 0's parameters: DeMo keeps equal replicas equal
      group=None              the process group (None: the default group)

    Collective: construction, step(), add_param_group() and load_state_dict() run on every
    worker with the same arguments; parameters are contiguous CPU float32 tensors. Options
    that workers disagree on raise trickle.MismatchError on every worker. Only lr may change
    after construction (the same on every worker). state_dict() holds each group's momentum
    and step count; loading it resumes bit for bit.
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        *,
        compression_decay: float = 0.999,
        weight_decay: float = 0.0,
        chunk: int = 64,
        k: int = 32,
        selection: str = "top_k",
        values: str = "fp32",
        codec_block: int = 32,
        seed: int = 0,
        broadcast_initial: bool = True,
        group=None,
    ):
        self._engines: List[Any] = []
        self._built_lr: List[float] = []
        self._dist_group = _resolve_group("DeMo", group)
        problem: Optional[BaseException] = None
        try:
            if selection not in SELECTIONS:
                raise ValueError(f"trickle.DeMo: selection must be one of {SELECTIONS}, got {selection!r}")
            if values not in CODECS:
                raise ValueError(f"trickle.DeMo: values must be one of trickle.CODECS {CODECS}, got {values!r}")
            _check_number("codec_block", codec_block, integer=True)
            _check_number("seed", seed, integer=True)
            if codec_block < 1:
                raise ValueError(f"trickle.DeMo: codec_block must be >= 1, got {codec_block}")
            if seed < 0:
                raise ValueError(f"trickle.DeMo: seed must be >= 0, got {seed}")
        except (TypeError, ValueError) as e:
            problem = e
        self._broadcast_initial = bool(broadcast_initial)
        self._common = dict(selection=selection, values=values, codec_block=codec_block, seed=seed)
        defaults = dict(lr=lr, compression_decay=compression_decay, weight_decay=weight_decay, chunk=chunk, k=k)
        self._init_problem = problem
        # torch.optim.Optimizer.__init__ calls add_param_group for each group, which builds
        # that group's engine (collective).
        super().__init__(params, defaults)
        self._init_problem = None

    # -- building --

    def _group_problem(self, group: Dict[str, Any]) -> Optional[BaseException]:
        try:
            for key in _GROUP_KEYS:
                _check_number(key, group[key], integer=key in ("chunk", "k"))
            for i, p in enumerate(group["params"]):
                if p.dtype != torch.float32 or p.device.type != "cpu":
                    raise ValueError(
                        f"trickle.DeMo: parameter {i} of group {len(self._engines)} is {p.dtype} on {p.device}; this "
                        "version takes CPU float32 parameters"
                    )
                if not p.is_contiguous():
                    raise ValueError(f"trickle.DeMo: parameter {i} of group {len(self._engines)} is not contiguous")
        except (TypeError, ValueError) as e:
            return e
        return None

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """Adds a parameter group and builds its engine (collective: every worker, alike)."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        problem = self._init_problem or self._group_problem(group)
        try:
            _C.agree(self._dist_group, "DeMo", "" if problem is None else str(problem))
        except ValueError:
            self.param_groups.pop()
            if problem is not None:
                raise problem from None
            raise
        index = len(self._engines)
        params = [(f"{index}.{j}", p) for j, p in enumerate(group["params"])]
        grads = [(n, torch.zeros_like(p, memory_format=torch.contiguous_format)) for n, p in params]
        options = {key: group[key] for key in _GROUP_KEYS}
        options.update(self._common)
        try:
            engine = _C.DeMoEngine(self._dist_group, params, grads, [_shape(p) for p in group["params"]], options)
        except BaseException:
            self.param_groups.pop()
            raise
        self._engines.append((engine, [t for _, t in grads], {key: group[key] for key in _FIXED_KEYS}))
        self._built_lr.append(group["lr"])
        if self._broadcast_initial and group["params"]:
            # One broadcast of the group's parameters, flattened (torch's collective: not in
            # the engine's accounts).
            with torch.no_grad():
                flat = torch.cat([p.detach().reshape(-1) for p in group["params"]])
                dist.broadcast(flat, src=_root_of(self._dist_group), group=self._dist_group)
                offset = 0
                for p in group["params"]:
                    p.copy_(flat[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()

    # -- the step --

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None):
        """Collective: one DeMo step of every parameter group (after backward()). With a
        closure, calls it first (with gradients enabled) and returns its loss. A parameter
        without a gradient steps as if its gradient were zero (its momentum still decays and
        is still sent)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for i, group in enumerate(self.param_groups):
            engine, grads, fixed = self._engines[i]
            changed = [key for key in _FIXED_KEYS if group[key] != fixed[key]]
            if changed:
                raise ValueError(
                    f"trickle.DeMo: {', '.join(changed)} of group {i} changed after construction; only lr may change"
                )
            for p, g in zip(group["params"], grads):
                if p.grad is None:
                    g.zero_()
                elif p.grad.is_sparse:
                    raise ValueError("trickle.DeMo: sparse gradients are not supported")
                else:
                    g.copy_(p.grad)
            self._follow_lr(i)
            engine.step()
        return loss

    def _follow_lr(self, i: int) -> None:
        """Gives group i's engine the group's lr if a scheduler (or a loaded state) changed it."""
        lr = self.param_groups[i]["lr"]
        if lr != self._built_lr[i]:
            self._engines[i][0].set_lr(float(lr))
            self._built_lr[i] = lr

    # -- accounts --

    def group_stats(self) -> List[Stats]:
        """Each parameter group's traffic account (this worker's)."""
        return [Stats(e.stats()) for e, _, _ in self._engines]

    @property
    def stats(self) -> Stats:
        """This worker's traffic account over every parameter group (dense_bytes: what a fp32
        all-reduce of every gradient at every step would have sent)."""
        total: Dict[str, Any] = {}
        for e, _, _ in self._engines:
            for key, v in e.stats().items():
                if key == "steps":
                    total[key] = max(total.get(key, 0), v)
                elif key != "reduction":
                    total[key] = total.get(key, 0) + v
        if not total:
            total = {key: 0 for key in Stats.FIELDS}
            total["reduction"] = 0.0
            return Stats(total)
        total["reduction"] = total["dense_bytes"] / total["bytes_sent"] if total["bytes_sent"] else 0.0
        return Stats(total)

    def momentum(self, group: int = 0) -> torch.Tensor:
        """Group `group`'s momentum on this worker, in the frequency domain (each chunk's
        coefficients, vectors' chunks first, then the tiles'; padded chunks included)."""
        return self._engines[group][0].momentum()

    # -- checkpoints --

    def state_dict(self) -> Dict[str, Any]:
        """torch.optim's state dict, plus each group's DeMo state (momentum, step count,
        configuration check) as uint8 tensors under 'trickle_demo'."""
        sd = super().state_dict()
        sd[_STATE_KEY] = [torch.frombuffer(bytearray(e.save_bytes()), dtype=torch.uint8) for e, _, _ in self._engines]
        return sd

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Collective: restores what state_dict() returned, on every worker at once. A state
        from another configuration, a damaged one, or one missing on any worker raises the
        same error on every worker and changes nothing."""
        sd = dict(state_dict)
        blobs = sd.pop(_STATE_KEY, None)
        problem = ""
        if not isinstance(blobs, (list, tuple)) or len(blobs) != len(self._engines):
            problem = (f"trickle.DeMo: the state has no '{_STATE_KEY}' entry for each of the {len(self._engines)} "
                       "parameter group(s) (not a trickle.DeMo state_dict?)")
        else:
            groups = sd.get("param_groups")
            if not isinstance(groups, list) or len(groups) != len(self.param_groups) or any(
                len(g.get("params", ())) != len(mine["params"]) for g, mine in zip(groups, self.param_groups)
            ):
                problem = "trickle.DeMo: the state's parameter groups do not match this optimizer's"
            elif any(_as_bytes(b) is None for b in blobs):
                problem = f"trickle.DeMo: '{_STATE_KEY}' must hold uint8 tensors or bytes"
        _C.agree(self._dist_group, "DeMo.load_state_dict", problem)
        backups = [e.save_bytes() for e, _, _ in self._engines]
        done = 0
        try:
            for (e, _, _), b in zip(self._engines, blobs):
                e.load_bytes(_as_bytes(b))
                done += 1
        except BaseException:
            # Every worker failed at the same group (the load is collective): put back the
            # groups loaded before it, so that nothing changed.
            for (e, _, _), b in zip(self._engines[:done], backups):
                e.load_bytes(b)
            raise
        super().load_state_dict(sd)
        for i in range(len(self.param_groups)):
            self._follow_lr(i)
