"""trickle.SPARTA, trickle.DiLoCo and trickle.SPARTADiLoCo over a torch.distributed process group.

Each class wraps one C++ object of trickle/torch/algorithms.hpp built over a
trickle::comm::process_group (trickle/torch/process_group.hpp). Construction, step(),
and load_state_dict() are collective: every rank of the group calls them in the same order.

Errors are raised on every rank together: this module checks the arguments, then all ranks
agree on whether any of them found a problem (one small collective) before the C++
constructor runs, and the C++ constructor agrees again on the configuration and the
model's layout. A rank with a bad argument raises its own error (TypeError or
ValueError); the other ranks raise a ValueError naming that rank.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Mapping
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from . import _C
from ._errors import CommError, MismatchError  # noqa: F401  (documented alongside)

# The registered policy names, read from the library's registries
# (include/trickle/*/registry.hpp) through the extension: the names the C++ policies
# declare, in the registries' order. A policy added to a registry appears here.
SAMPLERS = tuple(_C.registry["sampler"])
SCHEDULES = tuple(_C.registry["schedule"])
TOPOLOGIES = tuple(_C.registry["topology"])
CODECS = tuple(_C.registry["codec"])
OUTER_OPTIMIZERS = tuple(_C.registry["outer"])
LAYERWISE_MODES = ("per_tensor", "rotating")

# The keyword arguments each registered policy takes (family -> name -> keywords), found
# by the C++ side from the policy's fields: python/csrc/common.hpp.
_POLICY_OPTIONS: Dict[str, Dict[str, Tuple[str, ...]]] = {
    family: {name: tuple(keys) for name, keys in by_name.items()} for family, by_name in _C.policy_options.items()
}


def _takes(family: str, name: str, keyword: str) -> bool:
    """Whether the registered policy `name` of `family` takes the keyword argument."""
    return keyword in _POLICY_OPTIONS[family][name]


def _taking(family: str, keyword: str) -> str:
    """The policies of `family` that take the keyword, as "'a' or 'b'"."""
    return " or ".join(repr(n) for n, keys in _POLICY_OPTIONS[family].items() if keyword in keys)

# The "format" entry of state_dict(); load_state_dict() refuses any other.
STATE_FORMAT = "trickle.checkpoint.v1"

# ---------------------------------------------------------------------------------------
# Options. Every keyword argument of the classes, with its default. Only these are accepted.

_COMMON = {
    "seed": 0,
    "topology": "all_reduce",
    "island_size": 2,
    "broadcast_initial": True,
    "codec_block": 64,
    "stochastic_rounding": False,
    "group": None,
}

_SPARTA = {
    "fraction": 0.005,
    "interval": 1,
    "sampler": "uniform",
    "block_size": 256,
    "layerwise_mode": "per_tensor",
    "schedule": "constant",
    "end_fraction": 0.001,
    "schedule_steps": 1000,
    "points": None,
    "warmup_steps": 0,
    "warmup_start_fraction": 0.05,
    "codec": "fp32",
}

_DILOCO = {
    "interval": 500,
    "outer": "nesterov",
    "outer_lr": None,
    "momentum": None,
    "betas": (0.9, 0.999),
    "eps": 1e-8,
    "weight": 1.0,
    "drop_probability": 0.0,
    "prune_fraction": 0.0,
    "outer_codec": "fp32",
    "error_feedback": 0.0,
}

# DiLoCo across processes whose membership changes (trickle.Elastic; _elastic.py).
_ELASTIC = {
    "elastic": None,
    "min_workers": 1,
}

_DEFAULTS = {
    "SPARTA": {**_SPARTA, **_COMMON},
    "DiLoCo": {**_DILOCO, **_ELASTIC, **_COMMON},
    "SPARTADiLoCo": {**_SPARTA, "sparta_interval": 1, **_DILOCO, **_COMMON},
}


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _choice(kind, key, value, valid):
    if not isinstance(value, str) or value not in valid:
        raise ValueError(f"trickle.{kind}: unknown {key} {value!r}; valid: {', '.join(valid)}")
    return value


def _int(kind, key, value, lo=0, hi=(1 << 64) - 1):
    if not _is_int(value):
        raise TypeError(f"trickle.{kind}: {key} must be an int, got {type(value).__name__}")
    if not lo <= int(value) <= hi:
        raise ValueError(f"trickle.{kind}: {key} must be in [{lo}, {hi}], got {value}")
    return int(value)


def _real(kind, key, value):
    if not _is_real(value):
        raise TypeError(f"trickle.{kind}: {key} must be a number, got {type(value).__name__}")
    return float(value)


def _bool(kind, key, value):
    if not isinstance(value, bool):
        raise TypeError(f"trickle.{kind}: {key} must be True or False, got {value!r}")
    return value


def _parse_options(kind: str, given: Dict[str, Any]) -> Dict[str, Any]:
    """The option dict the C++ factories read, from the keyword arguments. Raises TypeError
    for an unknown keyword or a value of the wrong type, ValueError for an unknown name.
    Ranges (fraction in (0, 1], intervals >= 1, ...) are checked by the C++ side, on every
    rank together, with trickle's messages."""
    defaults = _DEFAULTS[kind]
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise TypeError(
            f"trickle.{kind}: unknown keyword argument{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(u) for u in unknown)}; valid: {', '.join(sorted(defaults))}"
        )
    o = {**defaults, **given}
    o.pop("group")
    o.pop("elastic", None)
    out: Dict[str, Any] = {}
    out["seed"] = _int(kind, "seed", o["seed"])
    out["topology"] = _choice(kind, "topology", o["topology"], TOPOLOGIES)
    out["island_size"] = _int(kind, "island_size", o["island_size"], lo=-(1 << 31), hi=(1 << 31) - 1)
    out["broadcast_initial"] = _bool(kind, "broadcast_initial", o["broadcast_initial"])
    out["codec_block"] = _int(kind, "codec_block", o["codec_block"])
    out["stochastic_rounding"] = _bool(kind, "stochastic_rounding", o["stochastic_rounding"])
    out["codec"] = "fp32"
    out["outer_codec"] = "fp32"
    if kind in ("SPARTA", "SPARTADiLoCo"):
        out["codec"] = _choice(kind, "codec", o["codec"], CODECS)
        out["fraction"] = _real(kind, "fraction", o["fraction"])
        out["sampler"] = _choice(kind, "sampler", o["sampler"], SAMPLERS)
        out["block_size"] = _int(kind, "block_size", o["block_size"])
        out["layerwise_mode"] = _choice(kind, "layerwise_mode", o["layerwise_mode"], LAYERWISE_MODES)
        out["schedule"] = _choice(kind, "schedule", o["schedule"], SCHEDULES)
        out["end_fraction"] = _real(kind, "end_fraction", o["end_fraction"])
        out["schedule_steps"] = _int(kind, "schedule_steps", o["schedule_steps"])
        out["warmup_steps"] = _int(kind, "warmup_steps", o["warmup_steps"])
        out["warmup_start_fraction"] = _real(kind, "warmup_start_fraction", o["warmup_start_fraction"])
        points = o["points"]
        schedule = out["schedule"]
        if _takes("schedule", schedule, "points"):
            if points is None:
                raise ValueError(f"trickle.{kind}: schedule={schedule!r} needs points=[(step, fraction), ...]")
            try:
                pts = [(int(s), float(f)) for s, f in points]
            except (TypeError, ValueError):
                raise TypeError(f"trickle.{kind}: points must be a list of (step, fraction) pairs") from None
            if any(s < 0 for s, _ in pts):
                raise ValueError(f"trickle.{kind}: the steps of points must be >= 0")
            out["points"] = pts
        else:
            if points is not None:
                raise ValueError(f"trickle.{kind}: points applies to schedule={_taking('schedule', 'points')} only")
            out["points"] = []
        if out["warmup_steps"] and not _takes("schedule", schedule, "warmup_steps"):
            raise ValueError(f"trickle.{kind}: warmup_steps cannot be combined with schedule={schedule!r}")
        if kind == "SPARTA":
            out["interval"] = _int(kind, "interval", o["interval"])
        else:
            out["sparta_interval"] = _int(kind, "sparta_interval", o["sparta_interval"])
    if kind in ("DiLoCo", "SPARTADiLoCo"):
        out["outer_codec"] = _choice(kind, "outer_codec", o["outer_codec"], CODECS)
        out["error_feedback"] = _real(kind, "error_feedback", o["error_feedback"])
        out["interval"] = _int(kind, "interval", o["interval"])
        outer = _choice(kind, "outer", o["outer"], OUTER_OPTIMIZERS)
        out["outer"] = outer
        lr, mom = o["outer_lr"], o["momentum"]
        if lr is not None:
            lr = _real(kind, "outer_lr", lr)
            if not _takes("outer", outer, "outer_lr"):
                raise ValueError(f"trickle.{kind}: outer={outer!r} has no learning rate (outer_lr must be None)")
        if mom is not None:
            mom = _real(kind, "momentum", mom)
            if not _takes("outer", outer, "momentum"):
                raise ValueError(
                    f"trickle.{kind}: momentum applies to outer={_taking('outer', 'momentum')}, not {outer!r}"
                )
        out["outer_lr"] = lr
        out["momentum"] = mom
        betas = o["betas"]
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2 and all(_is_real(b) for b in betas)):
            raise TypeError(f"trickle.{kind}: betas must be a pair of numbers (beta1, beta2), got {betas!r}")
        out["beta1"], out["beta2"] = float(betas[0]), float(betas[1])
        out["eps"] = _real(kind, "eps", o["eps"])
        out["weight"] = _real(kind, "weight", o["weight"])
        out["drop_probability"] = _real(kind, "drop_probability", o["drop_probability"])
        out["prune_fraction"] = _real(kind, "prune_fraction", o["prune_fraction"])
    if kind == "DiLoCo":
        out["min_workers"] = _int(kind, "min_workers", o["min_workers"], lo=-(1 << 31), hi=(1 << 31) - 1)
        if given.get("elastic") is None and out["min_workers"] != 1:
            raise ValueError(f"trickle.{kind}: min_workers (the quorum) applies with elastic= only")
    return out


# ---------------------------------------------------------------------------------------
# The model.


def _named_tensors(kind: str, model) -> List[Tuple[str, torch.Tensor]]:
    """(name, tensor) pairs of an nn.Module (named_parameters()), a mapping name -> tensor,
    a single tensor, or an iterable of tensors (named "0", "1", ...) or (name, tensor) pairs."""
    if isinstance(model, torch.nn.Module):
        items = list(model.named_parameters())
    elif isinstance(model, torch.Tensor):
        items = [("0", model)]
    elif isinstance(model, Mapping):
        items = list(model.items())
    else:
        try:
            seq = list(model)
        except TypeError:
            raise TypeError(
                f"trickle.{kind}: expected an nn.Module, a tensor, or an iterable of tensors or (name, tensor) "
                f"pairs, got {type(model).__name__}"
            ) from None
        items = []
        for i, x in enumerate(seq):
            if isinstance(x, torch.Tensor):
                items.append((str(i), x))
            elif isinstance(x, (tuple, list)) and len(x) == 2 and isinstance(x[0], str):
                items.append((x[0], x[1]))
            elif isinstance(x, Mapping) and "params" in x:
                raise TypeError(
                    f"trickle.{kind}: item {i} is an optimizer parameter group; pass the module, or the tensors "
                    "(e.g. [p for g in optimizer.param_groups for p in g['params']])"
                )
            else:
                raise TypeError(
                    f"trickle.{kind}: item {i} is a {type(x).__name__}; expected a tensor or a (name, tensor) pair"
                )
    out = []
    for name, t in items:
        if not isinstance(name, str):
            raise TypeError(f"trickle.{kind}: parameter names must be strings, got {type(name).__name__}")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"trickle.{kind}: parameter '{name}' is a {type(t).__name__}, not a tensor")
        if t.device.type != "cpu":
            raise ValueError(
                f"trickle.{kind}: parameter '{name}' is on {t.device}; this build of trickle supports CPU tensors "
                "only (its communicator, comm::process_group, moves host memory over torch.distributed, e.g. "
                "gloo); keep the model on the CPU"
            )
        out.append((name, t))
    return out


def _resolve_group(kind: str, group):
    if not dist.is_available():
        raise RuntimeError(f"trickle.{kind}: this torch was built without torch.distributed")
    if group is None:
        if not dist.is_initialized():
            raise RuntimeError(
                f"trickle.{kind}: torch.distributed is not initialized; call "
                "torch.distributed.init_process_group('gloo', ...) first, or pass group="
            )
        group = dist.distributed_c10d._get_default_group()
    if group is getattr(dist.GroupMember, "NON_GROUP_MEMBER", object()):
        raise ValueError(f"trickle.{kind}: this rank is not a member of the process group it was given")
    if not isinstance(group, dist.ProcessGroup):
        raise TypeError(
            f"trickle.{kind}: group must be a torch.distributed.ProcessGroup (or None for the default group), "
            f"got {type(group).__name__}"
        )
    return group


def _as_bytes(blob) -> Optional[bytes]:
    if isinstance(blob, (bytes, bytearray, memoryview)):
        return bytes(blob)
    if isinstance(blob, torch.Tensor) and blob.dtype == torch.uint8 and blob.dim() == 1:
        return blob.cpu().contiguous().numpy().tobytes()
    return None


# ---------------------------------------------------------------------------------------
# Stats.


class Stats:
    """One worker's account of an algorithm's communication (trickle::exchange_stats).

    Fields, read as attributes (stats.bytes_sent) or keys (stats["bytes_sent"];
    dict(stats) and stats.as_dict() give a plain dict):
      steps, exchanges          step() calls, and those that communicated
      values                    values this worker put on the wire, over all exchanges
      bytes_sent, bytes_received, calls    over all exchanges
      last_bytes_sent, last_bytes_received, last_calls, last_values   the latest exchange
      dense_bytes               what a dense fp32 all-reduce of all parameters at every
                                step would have sent, under the same cost model
      reduction                 dense_bytes / bytes_sent (0 before anything was sent)
      initial_bytes_sent, initial_bytes_received, initial_calls   the initial broadcast at
                                construction (not part of the totals above)
      code_bytes_sent, scale_bytes_sent, index_bytes_sent, padding_bytes_sent
                                bytes_sent by part: codes (plain fp32 values too), per-block
                                scales (and DiLoCo's weight sum), a sparsifier's indices, and
                                padding; they sum to bytes_sent
    Not a Mapping subclass on purpose: `values` is a field, not Mapping.values().
    """

    FIELDS = (
        "steps",
        "exchanges",
        "values",
        "bytes_sent",
        "bytes_received",
        "calls",
        "last_bytes_sent",
        "last_bytes_received",
        "last_calls",
        "last_values",
        "dense_bytes",
        "reduction",
        "initial_bytes_sent",
        "initial_bytes_received",
        "initial_calls",
        "code_bytes_sent",
        "scale_bytes_sent",
        "index_bytes_sent",
        "padding_bytes_sent",
    )
    __slots__ = ("_d",)

    def __init__(self, d: Mapping):
        object.__setattr__(self, "_d", {k: d[k] for k in self.FIELDS})

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._d[name]
        except KeyError:
            raise AttributeError(f"trickle.Stats has no field {name!r}; fields: {', '.join(self.FIELDS)}") from None

    def __setattr__(self, name, value):
        raise AttributeError("trickle.Stats is read-only")

    def __getitem__(self, key):
        return self._d[key]

    def __contains__(self, key):
        return key in self._d

    def keys(self):
        return self._d.keys()

    def __iter__(self):
        return iter(self.FIELDS)

    def __len__(self):
        return len(self.FIELDS)

    def __eq__(self, other):
        if isinstance(other, Stats):
            return self._d == other._d
        return NotImplemented

    __hash__ = None

    def as_dict(self) -> Dict[str, Any]:
        return dict(self._d)

    def __reduce__(self):
        return (Stats, (dict(self._d),))

    def __repr__(self):
        d = self._d
        return (
            f"trickle.Stats(steps={d['steps']}, exchanges={d['exchanges']}, values={d['values']}, "
            f"bytes_sent={d['bytes_sent']}, bytes_received={d['bytes_received']}, dense_bytes={d['dense_bytes']}, "
            f"reduction={d['reduction']:.1f}, initial_bytes_sent={d['initial_bytes_sent']})"
        )


# ---------------------------------------------------------------------------------------
# The algorithms.


class _Algorithm:
    _kind = "?"
    _factory = None

    def _build(self, model, options: Dict[str, Any]):
        kind = self._kind
        if options.get("elastic") is not None:
            return self._build_elastic(model, options)
        group = _resolve_group(kind, options.get("group"))
        problem: Optional[BaseException] = None
        opts: Dict[str, Any] = {}
        params: List[Tuple[str, torch.Tensor]] = []
        try:
            opts = _parse_options(kind, options)
            params = _named_tensors(kind, model)
        except (TypeError, ValueError) as e:
            problem = e
        # Every rank learns whether any rank found a problem before the collective
        # constructor starts, so that no rank is left waiting in it.
        try:
            _C.agree(group, kind, "" if problem is None else str(problem))
        except ValueError:
            if problem is not None:
                raise problem from None
            raise
        self._group = group  # keeps the Python process group alive as long as this object
        self._options = opts
        self._impl = type(self)._factory(group, params, opts)

    def _build_elastic(self, model, options: Dict[str, Any]):
        # Over trickle.Elastic there is no group to agree through before construction: each
        # worker checks its own arguments, and the members' configurations are compared by
        # the C++ side (at construction among the first members, at the welcome for a joiner).
        from ._elastic import Elastic

        kind = self._kind
        if kind != "DiLoCo":
            raise TypeError(f"trickle.{kind}: elastic= is offered by trickle.DiLoCo in this version (from C++, "
                            "SPARTA and SPARTA + DiLoCo run over comm::elastic_group too)")
        el = options["elastic"]
        if not isinstance(el, Elastic):
            raise TypeError(f"trickle.{kind}: elastic must be a trickle.Elastic, got {type(el).__name__}")
        if options.get("group") is not None:
            raise TypeError(f"trickle.{kind}: pass group= or elastic=, not both (an elastic worker's groups are "
                            "made per epoch from the store)")
        opts = _parse_options(kind, options)
        params = _named_tensors(kind, model)
        self._group = None
        self._elastic = el  # keeps the store alive as long as this object
        self._options = opts
        self._impl = _C.diloco_elastic(el.store, el.id, el.initial, int(round(el.timeout * 1000)),
                                       int(round(el.liveness * 1000)), el.job, params, opts)

    # -- collective operations --

    def step(self) -> None:
        """Collective: call on every worker after every optimizer.step(), and never between a
        forward pass and its backward (trickle writes the parameters in place and bumps their
        version counters, so such a backward raises autograd's in-place modification error)."""
        self._impl.step()

    def state_dict(self) -> Dict[str, Any]:
        """This worker's algorithm state (step counters, sampler position, DiLoCo's snapshot
        and outer-optimizer state, traffic counts), not the model's parameters: save those
        with the model. Works with torch.save / torch.load."""
        return {
            "format": STATE_FORMAT,
            "algorithm": self._kind,
            "trickle": self._impl.save_bytes(),
            "rank": self._impl.rank,
            "world_size": self._impl.world_size,
        }

    def load_state_dict(self, state: Mapping) -> None:
        """Collective: restores a state_dict() saved by the same algorithm under the same
        configuration (every worker loads its own, at the same step). Build the object with
        broadcast_initial=False when the parameters are restored too, so that they are not
        overwritten by rank 0's. Raises on every worker alike if any worker's state is
        unusable; the object is then unchanged."""
        kind = self._kind
        problem: Optional[BaseException] = None
        blob = None
        if not isinstance(state, Mapping):
            problem = TypeError(f"trickle.{kind}.load_state_dict: expected a dict, got {type(state).__name__}")
        elif state.get("format") != STATE_FORMAT:
            problem = ValueError(
                f"trickle.{kind}.load_state_dict: not a trickle state (format {state.get('format')!r}, "
                f"expected {STATE_FORMAT!r})"
            )
        elif state.get("algorithm") != kind:
            problem = ValueError(
                f"trickle.{kind}.load_state_dict: this is the state of a trickle.{state.get('algorithm')}, "
                f"not of a trickle.{kind}"
            )
        else:
            blob = _as_bytes(state.get("trickle"))
            if blob is None:
                problem = TypeError(f"trickle.{kind}.load_state_dict: state['trickle'] must be bytes")
        if problem is not None:
            blob = b""  # fails in C++ on every worker together
        try:
            self._impl.load_bytes(blob)
        except ValueError:
            if problem is not None:
                raise problem from None
            raise
        if problem is not None:  # pragma: no cover (an empty checkpoint always fails)
            raise problem

    # -- information --

    @property
    def stats(self) -> Stats:
        """This worker's traffic account (see trickle.Stats)."""
        return Stats(self._impl.stats())

    @property
    def groups(self) -> List[Dict[str, Any]]:
        """The parameter groups, one per dtype: dtype, device, names, elements."""
        return self._impl.groups()

    @property
    def options(self) -> Dict[str, Any]:
        """The options this object was built with (as passed to the C++ side)."""
        return dict(self._options)

    @property
    def group(self):
        """The torch.distributed process group (None for an elastic worker)."""
        return self._group

    @property
    def membership(self) -> Dict[str, Any]:
        """Over trickle.Elastic: the view (epoch, workers) and what changed it (joined, left,
        joins_refused), the rounds retried after a failure or skipped below quorum, the
        bytes of state moved to joiners and the seconds spent waiting in renewals."""
        return dict(self._impl.membership())

    @property
    def rank(self) -> int:
        return self._impl.rank

    @property
    def world_size(self) -> int:
        return self._impl.world_size

    def __repr__(self):
        n = sum(g["elements"] for g in self.groups)
        return f"trickle.{self._kind}(rank {self.rank} of {self.world_size}, {n} parameters, {self.stats!r})"


class SPARTA(_Algorithm):
    """SPARTA: after every `interval`-th step, all workers average the same random `fraction`
    of the parameters (chosen from the shared seed; only values travel).

    trickle.SPARTA(model, *, fraction=0.005, interval=1, seed=0, sampler="uniform",
                   block_size=256, layerwise_mode="per_tensor", schedule="constant",
                   end_fraction=0.001, schedule_steps=1000, points=None, warmup_steps=0,
                   warmup_start_fraction=0.05, topology="all_reduce", island_size=2,
                   broadcast_initial=True, group=None)

    model: an nn.Module (its named_parameters()), a mapping name -> tensor, or an iterable
    of tensors or (name, tensor) pairs; CPU tensors of dtype float32, float16 or bfloat16,
    contiguous. sampler: uniform | permutation | block (block_size) | layerwise
    (layerwise_mode per_tensor | rotating). schedule: constant | linear | cosine (from
    `fraction` to end_fraction over schedule_steps) | piecewise (points=[(step, fraction)]),
    optionally preceded by a linear warmup from warmup_start_fraction over warmup_steps.
    topology: all_reduce | ring | gossip | exponential | islands (island_size). codec:
    one of trickle.CODECS (codec_block for those with blocks). Every registered name is in
    trickle.SAMPLERS, SCHEDULES, TOPOLOGIES and CODECS, read from the C++ registries.
    """

    _kind = "SPARTA"
    _factory = staticmethod(_C.sparta)

    def __init__(self, model, **options):
        self._build(model, options)


class DiLoCo(_Algorithm):
    """DiLoCo: workers train alone for `interval` steps (H), then one outer-optimizer step on
    the averaged parameter change.

    trickle.DiLoCo(model, *, interval=500, outer="nesterov", outer_lr=None, momentum=None,
                   betas=(0.9, 0.999), eps=1e-8, seed=0, weight=1.0, drop_probability=0.0,
                   prune_fraction=0.0, topology="all_reduce", island_size=2,
                   broadcast_initial=True, group=None, elastic=None, min_workers=1)

    outer: sgd (lr 1.0) | momentum | nesterov (lr 0.7, momentum 0.9) | adam (lr 1e-3, betas,
    eps) | average (every registered name: trickle.OUTER_OPTIMIZERS); outer_lr / momentum
    None keep those defaults. weight: this worker's
    weight in the average; drop_probability: each contribution dropped with that
    probability; prune_fraction: zero that fraction of each tensor's delta (smallest first).
    elastic: a trickle.Elastic instead of a group: workers are processes that may die and
    join (docs/elastic.md); min_workers: the quorum below which outer steps are skipped.
    """

    _kind = "DiLoCo"
    _factory = staticmethod(_C.diloco)

    def __init__(self, model, **options):
        self._build(model, options)


class SPARTADiLoCo(_Algorithm):
    """SPARTA inside DiLoCo's rounds: SPARTA every `sparta_interval` steps, an outer step
    every `interval` steps. Takes SPARTA's and DiLoCo's options (interval is DiLoCo's H).
    stats is the sum of both parts; sparse_stats and outer_stats are each part's."""

    _kind = "SPARTADiLoCo"
    _factory = staticmethod(_C.sparta_diloco)

    def __init__(self, model, **options):
        self._build(model, options)

    @property
    def sparse_stats(self) -> Stats:
        return Stats(self._impl.sparse_stats())

    @property
    def outer_stats(self) -> Stats:
        return Stats(self._impl.outer_stats())


def _signature(kind: str) -> inspect.Signature:
    params = [
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD),
    ]
    params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v) for k, v in _DEFAULTS[kind].items()]
    return inspect.Signature(params)


for _cls in (SPARTA, DiLoCo, SPARTADiLoCo):
    _cls.__init__.__signature__ = _signature(_cls._kind)
