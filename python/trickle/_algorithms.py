"""trickle.SPARTA, trickle.DiLoCo and trickle.SPARTADiLoCo over a torch.distributed process group.

Each class wraps one C++ model wrapper (python/csrc/common.hpp: trickle/torch/algorithms.hpp's,
with the codecs chosen per parameter group) built over a trickle::comm::process_group
(trickle/torch/process_group.hpp). Construction, step(), and load_state_dict() are
collective: every rank of the group calls them in the same order. Hooks (add_hook) run
after step(), on each rank (_hooks.py); Stats is _stats.py.

Errors are raised on every rank together: this module checks the arguments, then all ranks
agree on whether any of them found a problem (one small collective) before the C++
constructor runs, and the C++ constructor agrees again on the configuration and the
model's layout. A rank with a bad argument raises its own error (TypeError or
ValueError); the other ranks raise a ValueError naming that rank.
"""

from __future__ import annotations

import atexit
import inspect
import numbers
import weakref
from collections.abc import Mapping
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from . import _C
from ._errors import CommError, MismatchError  # noqa: F401  (documented alongside)
from ._hooks import HookHandle, _HookTable
from ._stats import Aggregation, Stats

# The registered policy names, read from the library's registries
# (include/trickle/*/registry.hpp) through the extension: the names the C++ policies
# declare, in the registries' order. A policy added to a registry appears here.
SAMPLERS = tuple(_C.registry["sampler"])
SCHEDULES = tuple(_C.registry["schedule"])
TOPOLOGIES = tuple(_C.registry["topology"])
CODECS = tuple(_C.registry["codec"])
OUTER_OPTIMIZERS = tuple(_C.registry["outer"])
# The sparsifiers of DiLoCo's outer gradient (codec::chunk_topk, codec::random_k), their
# values through outer_codec.
SPARSIFIERS = tuple(_C.registry["sparsifier"])
LAYERWISE_MODES = ("per_tensor", "rotating")
# codec= and outer_codec= take the registered codecs and "native" (codec::native: each
# parameter group in its own dtype: fp32, bf16 or fp16).
NATIVE_CODEC = _C.native_codec
_CODEC_NAMES = CODECS + (NATIVE_CODEC,)

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
# The options' plain fields (trickle::sparta_options, diloco_options) take the library's
# defaults, which the extension hands over (trickle::for_each_option): one home for each.

_LIB_SPARTA = _C.option_defaults["sparta"]
_LIB_DILOCO = _C.option_defaults["diloco"]

_COMMON = {
    "seed": _LIB_SPARTA["seed"],
    "topology": "all_reduce",
    "island_size": 2,
    "broadcast_initial": _LIB_SPARTA["broadcast_initial"],
    "codec_block": 64,
    "stochastic_rounding": _LIB_SPARTA["stochastic_rounding"],
    "group": None,
}

_SPARTA = {
    "fraction": _LIB_SPARTA["fraction"],
    "interval": _LIB_SPARTA["interval"],
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
    # Overlapped SPARTA (sparta_options::overlap; docs/streaming.md): the exchange of step t
    # travels during the next step and is applied at step t + 1, corrected for the change.
    "overlap": _LIB_SPARTA["overlap"],
}

_DILOCO = {
    "interval": _LIB_DILOCO["interval"],
    "outer": "nesterov",
    "outer_lr": None,
    "momentum": None,
    "betas": (0.9, 0.999),
    "eps": 1e-8,
    # The outer learning-rate schedule (outer::lr_scheduled): a schedule of trickle.SCHEDULES
    # whose fractions multiply outer_lr, its steps counted in outer steps; the keywords are
    # SPARTA's schedule keywords prefixed outer_lr_.
    "outer_lr_schedule": "constant",
    "outer_lr_end_fraction": 0.1,
    "outer_lr_schedule_steps": 100,
    "outer_lr_points": None,
    "outer_lr_warmup_steps": 0,
    "outer_lr_warmup_start_fraction": 0.05,
    "weight": _LIB_DILOCO["weight"],
    "drop_probability": _LIB_DILOCO["drop_probability"],
    "prune_fraction": _LIB_DILOCO["prune_fraction"],
    "outer_codec": "fp32",
    "error_feedback": _LIB_DILOCO["error_feedback"],
    # A sparsifier of the outer gradient (codec/sparse.hpp), its values through outer_codec.
    "outer_sparsifier": None,
    "sparse_chunk": _C.option_defaults["sparsifier"]["sparse_chunk"],
    "sparse_k": _C.option_defaults["sparsifier"]["sparse_k"],
    "sparse_fraction": _C.option_defaults["sparsifier"]["sparse_fraction"],
    # Streaming DiLoCo (diloco_options; docs/streaming.md).
    "fragments": _LIB_DILOCO["fragments"],
    "fragment_tensors": None,
    "overlap_steps": _LIB_DILOCO["overlap_steps"],
    "mix": _LIB_DILOCO["mix"],
    "carry_local": _LIB_DILOCO["carry_local"],
    # CUDA parameters: the snapshot and the outer optimizer's state in pinned host memory.
    "state_in_pinned_host": _LIB_DILOCO["state_in_pinned_host"],
    # How the outer step combines the workers' contributions (diloco_options::aggregate;
    # docs/robustness.md): the text aggregate::parse reads.
    "aggregate": "mean",
}

# Workers that are processes whose membership changes (trickle.Elastic; _elastic.py).
_ELASTIC = {
    "elastic": None,
    "min_workers": 1,
}

# The dense baseline (trickle::ddp): every parameter averaged every `interval` steps.
_DDP = {
    "interval": 1,
    "broadcast_initial": True,
    "group": None,
}

_DEFAULTS = {
    "SPARTA": {**_SPARTA, **_ELASTIC, **_COMMON},
    "DiLoCo": {**_DILOCO, **_ELASTIC, **_COMMON},
    "SPARTADiLoCo": {**_SPARTA, "sparta_interval": 1, **_DILOCO, **_ELASTIC, **_COMMON},
    "DDP": _DDP,
}

# What each keyword argument does (the classes' docstrings list them from here; the type
# stubs, __init__.pyi, repeat them, and tests/python/test_stubs.py checks that they agree).
_OPTION_DOCS = {
    "fraction": "base fraction of the parameters averaged per exchange, in (0, 1]",
    "interval": "exchange after every interval-th step",
    "interval (DiLoCo)": "H: an outer step after every H-th step",
    "interval (DDP)": "average every parameter after every interval-th step (1: every step, as DDP's gradients)",
    "sparta_interval": "the SPARTA part exchanges after every sparta_interval-th step",
    "sampler": "which positions: " + " | ".join(SAMPLERS),
    "block_size": "block sampler: values per aligned block",
    "layerwise_mode": "layerwise sampler: per_tensor (every tensor its share) | rotating (contiguous windows)",
    "schedule": "fraction schedule: " + " | ".join(SCHEDULES),
    "end_fraction": "linear / cosine: the fraction reached after schedule_steps steps",
    "schedule_steps": "linear / cosine: steps from fraction to end_fraction",
    "points": "piecewise: [(step, fraction), ...], steps strictly increasing",
    "warmup_steps": "a linear ramp from warmup_start_fraction over this many steps (0: none)",
    "warmup_start_fraction": "where the warm-up starts",
    "codec": "SPARTA's values on the wire: " + " | ".join(_CODEC_NAMES),
    "outer": "outer optimizer: " + " | ".join(OUTER_OPTIMIZERS),
    "outer_lr": "the outer learning rate (None: the optimizer's default; sgd 1.0, momentum/nesterov 0.7, adam 1e-3)",
    "momentum": "momentum / nesterov: the momentum (None: 0.9)",
    "betas": "adam: (beta1, beta2)",
    "eps": "adam: epsilon",
    "outer_lr_schedule": "outer learning-rate schedule, a multiplier of outer_lr in (0, 1] at each outer step: "
    + " | ".join(SCHEDULES) + " (constant: none)",
    "outer_lr_end_fraction": "linear / cosine lr schedule: the multiplier reached after outer_lr_schedule_steps",
    "outer_lr_schedule_steps": "linear / cosine lr schedule: outer steps from 1 to outer_lr_end_fraction",
    "outer_lr_points": "piecewise lr schedule: [(k, multiplier), ...], k = outer step - 1 (from 0), increasing",
    "outer_lr_warmup_steps": "a linear ramp of the multiplier over this many outer steps (0: none)",
    "outer_lr_warmup_start_fraction": "the multiplier the lr warm-up starts from",
    "weight": "this worker's weight in the average (e.g. its shard size); set_weight() changes it later",
    "drop_probability": "each worker's contribution to an outer step is dropped with this probability, in [0, 1)",
    "prune_fraction": "zero this fraction of each tensor's outer gradient, smallest magnitudes first, in [0, 1)",
    "outer_codec": "the outer gradient on the wire: " + " | ".join(_CODEC_NAMES),
    "error_feedback": "beta in [0, 1]: resend beta x the last outer gradient's compression error",
    "outer_sparsifier": "None | " + " | ".join(SPARSIFIERS) + ": send only part of the outer gradient "
    "(values through outer_codec; needs topology='all_reduce')",
    "sparse_chunk": "chunk_topk: values per chunk",
    "sparse_k": "chunk_topk: values kept per chunk (largest magnitudes), 1 <= sparse_k <= sparse_chunk",
    "sparse_fraction": "random_k: fraction of the values kept, in (0, 1] (shared positions, no index sent)",
    "overlap": "SPARTA: the exchange of step t travels during step t + 1 and is applied then, corrected for the "
    "local change (fp32 with the all_reduce topology travels on trickle's progress thread; CPU parameters)",
    "fragments": "Streaming DiLoCo: F fragments cut at tensor boundaries, their outer steps staggered over the round",
    "fragment_tensors": "Streaming DiLoCo: tensors per fragment, in order (None: F fragments balanced by size)",
    "overlap_steps": "Streaming DiLoCo: tau in [0, interval), the inner steps a fragment's exchange travels before "
    "its average is applied (with fragments=1: the whole outer step, delayed by tau; the eager outer step)",
    "mix": "Streaming DiLoCo: alpha in [0, 1], a late average merged as alpha x local + (1 - alpha) x global",
    "carry_local": "Streaming DiLoCo: a late average lands plus this worker's progress since its exchange began "
    "(no inner step lost, however large overlap_steps; needs overlap_steps > 0 and mix = 0)",
    "state_in_pinned_host": "CUDA parameters: keep the snapshot and the outer optimizer's state in pinned host "
    "memory instead of on the GPU (large models)",
    "aggregate": "how the outer step combines the contributions: mean | trimmed:K | median | clip:TAU (robust "
    "rules need topology='all_reduce', outer_codec='fp32', no streaming; a non-finite worker is excluded under any)",
    "elastic": "a trickle.Elastic instead of group: workers are processes that may die and join",
    "min_workers": "with elastic: the quorum; with fewer workers in the view an exchange (an outer step) is skipped "
    "and the step trains locally",
    "seed": "shared seed of the random choices (the same on every worker)",
    "topology": "how values are combined: " + " | ".join(TOPOLOGIES),
    "island_size": "islands topology: workers per island",
    "broadcast_initial": "at construction, give every worker rank 0's parameters",
    "codec_block": "values per scale of the block codecs (fp8_block, int8, int4, sign2)",
    "stochastic_rounding": "round with the shared Philox stream instead of to nearest (int8, int4, sign2)",
    "group": "the torch.distributed process group (None: the default group)",
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


def _schedule(kind: str, o: Dict[str, Any], prefix: str, what: str) -> Dict[str, Any]:
    """A schedule's options under `prefix` ("" for SPARTA's fraction schedule, "outer_lr_" for
    DiLoCo's learning-rate schedule), as the C++ side reads them. `what` names a point's
    value in messages ("fraction", "multiplier")."""
    out: Dict[str, Any] = {}
    name_key, points_key, warmup_key = prefix + "schedule", prefix + "points", prefix + "warmup_steps"
    name = out[name_key] = _choice(kind, name_key, o[name_key], SCHEDULES)
    for key in ("end_fraction", "warmup_start_fraction"):
        out[prefix + key] = _real(kind, prefix + key, o[prefix + key])
    for key in ("schedule_steps", "warmup_steps"):
        out[prefix + key] = _int(kind, prefix + key, o[prefix + key])
    points = o[points_key]
    if _takes("schedule", name, "points"):
        if points is None:
            raise ValueError(f"trickle.{kind}: {name_key}={name!r} needs {points_key}=[(step, {what}), ...]")
        try:
            pts = [(int(st), float(f)) for st, f in points]
        except (TypeError, ValueError):
            raise TypeError(f"trickle.{kind}: {points_key} must be a list of (step, {what}) pairs") from None
        if any(st < 0 for st, _ in pts):
            raise ValueError(f"trickle.{kind}: the steps of {points_key} must be >= 0")
        out[points_key] = pts
    else:
        if points is not None:
            raise ValueError(f"trickle.{kind}: {points_key} applies to {name_key}={_taking('schedule', 'points')} only")
        out[points_key] = []
    if out[warmup_key] and not _takes("schedule", name, "warmup_steps"):
        raise ValueError(f"trickle.{kind}: {warmup_key} cannot be combined with {name_key}={name!r}")
    return out


def _parse_options(kind: str, given: Dict[str, Any]) -> Dict[str, Any]:
    """The option dict the C++ factories read, from the keyword arguments. Raises TypeError
    for an unknown keyword or a value of the wrong type, ValueError for an unknown name or
    a combination that cannot apply. Ranges (fraction in (0, 1], intervals >= 1, ...) are
    checked by the C++ side, on every rank together, with trickle's messages."""
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
    if kind == "DDP":
        out["interval"] = _int(kind, "interval", o["interval"])
        out["broadcast_initial"] = _bool(kind, "broadcast_initial", o["broadcast_initial"])
        return out
    out["seed"] = _int(kind, "seed", o["seed"])
    out["topology"] = _choice(kind, "topology", o["topology"], TOPOLOGIES)
    out["island_size"] = _int(kind, "island_size", o["island_size"], lo=-(1 << 31), hi=(1 << 31) - 1)
    out["broadcast_initial"] = _bool(kind, "broadcast_initial", o["broadcast_initial"])
    out["codec_block"] = _int(kind, "codec_block", o["codec_block"])
    out["stochastic_rounding"] = _bool(kind, "stochastic_rounding", o["stochastic_rounding"])
    out["codec"] = "fp32"
    out["outer_codec"] = "fp32"
    if kind in ("SPARTA", "SPARTADiLoCo"):
        out["overlap"] = _bool(kind, "overlap", o["overlap"])
        out["codec"] = _choice(kind, "codec", o["codec"], _CODEC_NAMES)
        out["fraction"] = _real(kind, "fraction", o["fraction"])
        out["sampler"] = _choice(kind, "sampler", o["sampler"], SAMPLERS)
        out["block_size"] = _int(kind, "block_size", o["block_size"])
        out["layerwise_mode"] = _choice(kind, "layerwise_mode", o["layerwise_mode"], LAYERWISE_MODES)
        out.update(_schedule(kind, o, "", "fraction"))
        if kind == "SPARTA":
            out["interval"] = _int(kind, "interval", o["interval"])
        else:
            out["sparta_interval"] = _int(kind, "sparta_interval", o["sparta_interval"])
    if kind in ("DiLoCo", "SPARTADiLoCo"):
        out["outer_codec"] = _choice(kind, "outer_codec", o["outer_codec"], _CODEC_NAMES)
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
        lrs = _schedule(kind, o, "outer_lr_", "multiplier")
        scheduled = lrs["outer_lr_schedule"] != "constant" or lrs["outer_lr_warmup_steps"] > 0
        if scheduled and not _takes("outer", outer, "outer_lr_schedule"):
            raise ValueError(
                f"trickle.{kind}: outer={outer!r} has no learning rate to schedule; outer_lr_schedule applies to "
                f"outer={_taking('outer', 'outer_lr_schedule')}"
            )
        out.update(lrs)
        out["weight"] = _real(kind, "weight", o["weight"])
        out["drop_probability"] = _real(kind, "drop_probability", o["drop_probability"])
        out["prune_fraction"] = _real(kind, "prune_fraction", o["prune_fraction"])
        sp = o["outer_sparsifier"]
        if sp is not None:
            sp = _choice(kind, "outer_sparsifier", sp, SPARSIFIERS)
        out["outer_sparsifier"] = sp
        out["sparse_chunk"] = _int(kind, "sparse_chunk", o["sparse_chunk"])
        out["sparse_k"] = _int(kind, "sparse_k", o["sparse_k"])
        out["sparse_fraction"] = _real(kind, "sparse_fraction", o["sparse_fraction"])
        out["fragments"] = _int(kind, "fragments", o["fragments"])
        ft = o["fragment_tensors"]
        if ft is None:
            out["fragment_tensors"] = []
        else:
            if isinstance(ft, (str, bytes)) or not isinstance(ft, (list, tuple)):
                raise TypeError(f"trickle.{kind}: fragment_tensors must be a list of ints (tensors per fragment) "
                                f"or None, got {type(ft).__name__}")
            out["fragment_tensors"] = [_int(kind, "fragment_tensors[]", k, hi=(1 << 32) - 1) for k in ft]
        out["overlap_steps"] = _int(kind, "overlap_steps", o["overlap_steps"])
        out["mix"] = _real(kind, "mix", o["mix"])
        out["carry_local"] = _bool(kind, "carry_local", o["carry_local"])
        out["state_in_pinned_host"] = _bool(kind, "state_in_pinned_host", o["state_in_pinned_host"])
        agg = o["aggregate"]
        if not isinstance(agg, str):
            raise TypeError(f"trickle.{kind}: aggregate must be a str (mean, trimmed:K, median or clip:TAU), "
                            f"got {type(agg).__name__}")
        try:  # the library's parser, and its message
            _C.parse_aggregate(agg)
        except ValueError as e:
            raise ValueError(f"trickle.{kind}: {e}") from None
        out["aggregate"] = agg
    if "min_workers" in defaults:
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
        if t.device.type == "cuda" and not _C.build_info["cuda"]:
            raise ValueError(
                f"trickle.{kind}: parameter '{name}' is on {t.device}, but this build of trickle has no CUDA support "
                f"(trickle.build_info()['cuda'] is False: it was built against torch {_C.build_info['torch']} "
                "without nvcc, or against a CPU-only torch). Rebuild it where torch has CUDA and nvcc is found "
                "(CUDA_HOME, PATH, /usr/local/cuda, or pip install nvidia-cuda-nvcc): "
                "pip install --no-build-isolation --force-reinstall ./python (python/README.md); "
                "or keep the model on the CPU"
            )
        if t.device.type == "cuda" and kind == "DDP":
            raise ValueError(
                f"trickle.{kind}: parameter '{name}' is on {t.device}; trickle.DDP averages CPU parameters in this "
                "version (trickle::ddp refuses device memory): keep the model on the CPU, or use torch's "
                "DistributedDataParallel over NCCL for a dense GPU baseline"
            )
        if t.device.type not in ("cpu", "cuda"):
            raise ValueError(
                f"trickle.{kind}: parameter '{name}' is on {t.device}; trickle takes CPU and CUDA tensors"
            )
        out.append((name, t))
    cuda = sorted({str(t.device) for _, t in out if t.device.type == "cuda"})
    if len(cuda) > 1:
        raise ValueError(
            f"trickle.{kind}: the parameters are on {', '.join(cuda)}; one trickle object covers the parameters of "
            "one device (one per device, each over its own group)"
        )
    if cuda and any(t.device.type == "cpu" for _, t in out):
        first_cpu = next(n for n, t in out if t.device.type == "cpu")
        raise ValueError(
            f"trickle.{kind}: parameter '{first_cpu}' is on cpu while others are on {cuda[0]}; a model split "
            "over CPU and CUDA needs one trickle object per device"
        )
    return out


def _backend_name(group) -> str:
    try:
        return str(dist.get_backend(group)).lower()
    except Exception:  # noqa: BLE001 - a group torch cannot name: not NCCL as far as trickle knows
        return ""


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
# The algorithms.


# Every live trickle object, so that their C++ sides (which hold the process group and its
# backend's threads) are released by an atexit handler while the interpreter is still whole,
# not during interpreter finalization, where dropping the last reference to a Gloo group
# after torch's own teardown is a known way for torch to abort (pytorch/pytorch#190489).
# The handler changes nothing for a program that dropped its objects itself. (torch 2.15's
# Gloo also aborts at exit now and then without trickle: benchmarks/pytorch/gloo_exit_abort.py.)
_LIVE: "weakref.WeakSet[_Algorithm]" = weakref.WeakSet()


@atexit.register
def _release_at_exit() -> None:
    for algo in list(_LIVE):
        algo.__dict__.pop("_impl", None)
    _LIVE.clear()


class _Algorithm:
    _kind = "?"
    _factory = None

    def _build(self, model, options: Dict[str, Any]):
        kind = self._kind
        self._hooks = _HookTable()
        if options.get("elastic") is not None:
            return self._build_elastic(model, options)
        group = _resolve_group(kind, options.get("group"))
        if not _C.build_info["cuda"] and _backend_name(group) == "nccl":
            # (Raised on every rank alike, without a collective: the group carries CUDA tensors
            # only, and every rank runs the same build.)
            raise ValueError(
                f"trickle.{kind}: the process group's backend is NCCL, which carries CUDA tensors, and this build of "
                "trickle has no CUDA support (trickle.build_info()['cuda'] is False); rebuild it with CUDA "
                "(python/README.md), or use a Gloo group with CPU tensors"
            )
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
        # An object whose exchanges travel between steps runs its collectives on trickle's
        # progress thread while the trainer goes on: over the default group it gets a group of
        # its own (made by every rank together, once the ranks agree that it overlaps), so
        # that they never interleave with the trainer's own collectives.
        overlaps = bool(opts.get("overlap")) or int(opts.get("overlap_steps", 0)) > 0
        try:
            _C.agree(group, kind, "" if problem is None else str(problem), overlaps)
        except ValueError:
            if problem is not None:
                raise problem from None
            raise
        runs_on = group
        if overlaps and options.get("group") is None and _backend_name(group) != "nccl":
            runs_on = dist.new_group(backend=dist.get_backend(group))
        self._group = group  # keeps the Python process group alive as long as this object
        self._own_group = runs_on if runs_on is not group else None
        self._options = opts
        self._impl = type(self)._factory(runs_on, params, opts)
        _LIVE.add(self)

    def _build_elastic(self, model, options: Dict[str, Any]):
        # Over trickle.Elastic there is no group to agree through before construction: each
        # worker checks its own arguments, and the members' configurations are compared by
        # the C++ side (at construction among the first members, at the welcome for a joiner).
        from ._elastic import Elastic

        kind = self._kind
        el = options["elastic"]
        if not isinstance(el, Elastic):
            raise TypeError(f"trickle.{kind}: elastic must be a trickle.Elastic, got {type(el).__name__}")
        if options.get("group") is not None:
            raise TypeError(f"trickle.{kind}: pass group= or elastic=, not both (an elastic worker's groups are "
                            "made per epoch from the store)")
        opts = _parse_options(kind, options)
        params = _named_tensors(kind, model)
        if any(t.device.type == "cuda" for _, t in params):
            raise ValueError(f"trickle.{kind}: elastic= takes CPU parameters in this version (its groups are Gloo "
                             "groups over host memory); keep the elastic worker's model on the CPU, or use group=")
        self._group = None
        self._elastic = el  # keeps the store alive as long as this object
        self._options = opts
        from ._elastic import _carried

        carry_name, carry_save, carry_load = _carried(el.carry)
        self._impl = _C.elastic(kind, el.store, el.id, el.initial, int(round(el.timeout * 1000)),
                                int(round(el.liveness * 1000)), el.job, int(round(el.start_timeout * 1000)),
                                int(round(el.join_timeout * 1000)), el.hostname, el.renew_every,
                                int(round(el.store_recovery * 1000)), carry_name, carry_save, carry_load,
                                params, opts)
        _LIVE.add(self)

    # -- collective operations --

    def step(self) -> None:
        """Collective: call on every worker after every optimizer.step(), and never between a
        forward pass and its backward (trickle writes the parameters in place and bumps their
        version counters, so such a backward raises autograd's in-place modification error).
        Then calls the hooks due at this step (add_hook)."""
        self._impl.step()
        if self._hooks:
            self._hooks.run(self._impl.stats()["steps"], lambda: self.stats)

    def add_hook(self, fn: Callable[[int, Stats], Any], *, every: int = 1) -> HookHandle:
        """Registers fn(step, stats), called on this worker after every `every`-th step():
        `step` is stats.steps (the steps done, counted from 1; a resumed run continues the
        count), `stats` this object's Stats (SPARTA + DiLoCo: the sum of both parts). Local:
        each worker runs its own hooks (a hook that runs a collective must be added on every
        worker). Hooks run in the order they were added; one added or removed by a hook
        takes effect from the next step. If a hook raises, the exception propagates out of
        step() after the step itself completed (the algorithm's state is that of the step
        done), and the hooks after it are skipped for that step. Returns a HookHandle:
        handle.remove() unregisters the hook (also `with algo.add_hook(fn): ...`). Hooks are
        not part of state_dict()."""
        return self._hooks.add(self._kind, fn, every)

    def state_dict(self) -> Dict[str, Any]:
        """This worker's algorithm state (step counters, sampler position, DiLoCo's snapshot
        and outer-optimizer state, traffic counts), not the model's parameters: save those
        with the model. Works with torch.save / torch.load. With overlap=True, an exchange
        still pending is applied first (call it on every worker at the same step, as a
        checkpoint needs anyway)."""
        self._impl.flush()  # an overlapped exchange still pending is applied first
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
            else:
                problem = self._foreign_state_problem(state)
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

    def _own_state(self) -> List[str]:
        """What this worker's state holds of its own rather than equal on every worker."""
        own = list(self._impl.own_state())
        if self._options.get("topology", "all_reduce") != "all_reduce":
            own.append(f"replica (topology={self._options['topology']!r} keeps the replicas apart)")
        return own

    def _foreign_state_problem(self, state: Mapping) -> Optional[BaseException]:
        """A state saved by another rank, or by a world of another size, loads only where
        every worker's state is the same (then the traffic counts continue from the saving
        worker's); otherwise a ValueError naming what is the saving worker's own."""
        if self._group is None:  # trickle.Elastic: ranks and sizes change by design
            return None
        saved_rank, saved_world = state.get("rank"), state.get("world_size")
        if saved_rank is None or saved_world is None:
            return None
        if saved_rank == self.rank and saved_world == self.world_size:
            return None
        own = self._own_state()
        if not own:
            return None
        return ValueError(
            f"trickle.{self._kind}.load_state_dict: this state was saved by rank {saved_rank} of {saved_world}, "
            f"and this is rank {self.rank} of {self.world_size}; the state holds that worker's own "
            f"{', '.join(own)}, so loading it here would change the result. Load each rank's own state_dict "
            "(a state with nothing of its own (no error_feedback, no streaming fragments, topology='all_reduce') "
            "loads on any rank)"
        )

    # -- information --

    @property
    def stats(self) -> Stats:
        """This worker's traffic account, summed over the parameter groups (see trickle.Stats)."""
        return Stats(self._impl.stats())

    @property
    def group_stats(self) -> List[Stats]:
        """Each parameter group's account (the order of `groups`); `stats` is their sum."""
        return [Stats(self._impl.group_stats(g, 0)) for g in range(len(self._impl.groups()))]

    @property
    def groups(self) -> List[Dict[str, Any]]:
        """The parameter groups, one per dtype: dtype, device, names, elements."""
        return self._impl.groups()

    @property
    def options(self) -> Dict[str, Any]:
        """The options this object was built with (as passed to the C++ side)."""
        return dict(self._options)

    @property
    def collectives(self) -> int:
        """The collectives this worker's communicator started so far (construction included;
        0 over trickle.Elastic): what the steps cost in round trips. A SPARTA exchange over a
        small model is one (docs/pytorch.md, "Collectives per step")."""
        return self._impl.collectives

    @property
    def group(self):
        """The torch.distributed process group (None for an elastic worker)."""
        return self._group

    @property
    def overlap(self) -> Dict[str, int]:
        """How the exchanges travel against the training steps, as the library decided it:
        `sparse_steps`, the steps a SPARTA exchange runs behind (1 with overlap=True), and
        `outer_steps`, the steps a DiLoCo fragment's exchange runs behind (overlap_steps);
        0 where an exchange blocks the step that starts it (its result may still land late,
        with the same bits): on a CUDA group in this version, for instance."""
        return dict(self._impl.overlap())

    @property
    def membership(self) -> Dict[str, Any]:
        """Over trickle.Elastic: the view (epoch, workers) and what changed it (joined, left,
        joins_refused), the rounds retried after a failure or skipped below quorum, the
        bytes of state moved to joiners and the seconds that took (transfer_seconds), and the
        seconds spent waiting in renewals."""
        return dict(self._impl.membership())

    @property
    def rank(self) -> int:
        """This worker's rank in the group (over trickle.Elastic: in the current view)."""
        return self._impl.rank

    @property
    def world_size(self) -> int:
        """The number of workers (over trickle.Elastic: in the current view)."""
        return self._impl.world_size

    def __repr__(self):
        n = sum(g["elements"] for g in self.groups)
        return f"trickle.{self._kind}(rank {self.rank} of {self.world_size}, {n} parameters: {self.stats})"


class _OuterMixin:
    """What DiLoCo and SPARTA + DiLoCo add."""

    def set_weight(self, weight: float) -> None:
        """This worker's weight in the coming outer steps (e.g. the tokens or samples it
        processed since the last one), finite and >= 0. Local: weights may differ between
        workers and travel with the outer gradients; if every worker's is 0 the outer
        gradient is 0."""
        if not _is_real(weight):
            raise TypeError(f"trickle.{self._kind}.set_weight: the weight must be a number, got {type(weight).__name__}")
        self._impl.set_weight(float(weight))

    @property
    def aggregation(self) -> Aggregation:
        """How the outer steps combined the workers' contributions (aggregate=; see
        trickle.Aggregation): the rule, the rounds, each worker's weight, outer-gradient
        norm and distance to the aggregate in the last round, the ranks clipped and excluded
        (a non-finite contribution) then, and the totals. The same on every worker. For a
        model of several dtypes, the first parameter group's (group_aggregation has each)."""
        return Aggregation(self._impl.aggregation(0))

    @property
    def group_aggregation(self) -> List[Aggregation]:
        """Each parameter group's aggregation record (the order of `groups`): each group's
        outer step combines, and excludes, on its own."""
        return [Aggregation(self._impl.aggregation(g)) for g in range(len(self._impl.groups()))]


def _options_doc(kind: str) -> str:
    """The option list of a class's docstring, from _DEFAULTS and _OPTION_DOCS."""
    lines = []
    for key, default in _DEFAULTS[kind].items():
        text = _OPTION_DOCS[key + ({"SPARTA": "", "DDP": " (DDP)"}.get(kind, " (DiLoCo)") if key == "interval" else "")]
        lines.append(f"      {key}={default!r}: {text}")
    return "\n".join(lines)


class SPARTA(_Algorithm):
    """SPARTA: after every `interval`-th step, all workers average the same random `fraction`
    of the parameters (chosen from the shared seed; only values travel).

    trickle.SPARTA(model, **options); model: an nn.Module (its named_parameters()), a mapping
    name -> tensor, a tensor, or an iterable of tensors or (name, tensor) pairs; CPU tensors
    of dtype float32, float16 or bfloat16, contiguous. The names in the option lists are
    trickle.SAMPLERS, SCHEDULES, TOPOLOGIES and CODECS (read from the C++ registries), and
    "native" for codec. A keyword of a policy other than the chosen one (block_size with
    sampler="uniform", say) is ignored; points and warmup_steps where they cannot apply are
    refused. Options (keyword only):
{options}

    Methods: step(), add_hook(fn, every=1), state_dict(), load_state_dict(state).
    Properties: stats, group_stats, groups, options, group, rank, world_size, membership.
    """

    _kind = "SPARTA"
    _factory = staticmethod(_C.sparta)

    def __init__(self, model, **options):
        """Builds the algorithm over `model` (collective: every worker, the same options); see the class docstring."""
        self._build(model, options)


class DiLoCo(_OuterMixin, _Algorithm):
    """DiLoCo: workers train alone for `interval` steps (H), then one outer-optimizer step on
    the averaged parameter change (the outer gradient).

    trickle.DiLoCo(model, **options); model as for trickle.SPARTA. The outer gradient travels
    through outer_codec, or through outer_sparsifier (its values through outer_codec). An
    outer learning-rate schedule multiplies outer_lr at outer step t by the schedule's
    fraction at t - 1 (outer::lr_scheduled). fragments / fragment_tensors / overlap_steps /
    mix / carry_local make it Streaming DiLoCo (docs/streaming.md). aggregate chooses how the outer step
    combines the contributions, a robust rule against outliers (docs/robustness.md); under
    every rule a worker whose outer gradient is not finite is left out of the round, named
    in `aggregation` on every worker. Options (keyword only):
{options}

    Methods: step(), add_hook(fn, every=1), set_weight(w), state_dict(), load_state_dict(state).
    Properties: stats, group_stats, groups, options, group, rank, world_size, membership,
    aggregation, group_aggregation.
    """

    _kind = "DiLoCo"
    _factory = staticmethod(_C.diloco)

    def __init__(self, model, **options):
        """Builds the algorithm over `model` (collective: every worker, the same options); see the class docstring."""
        self._build(model, options)


class SPARTADiLoCo(_OuterMixin, _Algorithm):
    """SPARTA inside DiLoCo's rounds: SPARTA every `sparta_interval` steps, an outer step
    every `interval` steps (at a step that ends a round, only the outer step runs). Takes
    SPARTA's and DiLoCo's options (interval is DiLoCo's H). stats is the sum of both parts;
    sparse_stats and outer_stats are each part's (the initial broadcast is on the DiLoCo
    part). Options (keyword only):
{options}

    Methods: step(), add_hook(fn, every=1), set_weight(w), state_dict(), load_state_dict(state).
    Properties: stats, sparse_stats, outer_stats, group_stats, sparse_group_stats,
    outer_group_stats, groups, options, group, rank, world_size, membership, aggregation,
    group_aggregation.
    """

    _kind = "SPARTADiLoCo"
    _factory = staticmethod(_C.sparta_diloco)

    def __init__(self, model, **options):
        """Builds the algorithm over `model` (collective: every worker, the same options); see the class docstring."""
        self._build(model, options)

    @property
    def sparse_stats(self) -> Stats:
        """The SPARTA part's account, summed over the parameter groups."""
        return Stats(self._impl.sparse_stats())

    @property
    def outer_stats(self) -> Stats:
        """The DiLoCo part's account (with the initial broadcast), summed over the parameter groups."""
        return Stats(self._impl.outer_stats())

    @property
    def sparse_group_stats(self) -> List[Stats]:
        """The SPARTA part's account of each parameter group."""
        return [Stats(self._impl.group_stats(g, 1)) for g in range(len(self._impl.groups()))]

    @property
    def outer_group_stats(self) -> List[Stats]:
        """The DiLoCo part's account of each parameter group."""
        return [Stats(self._impl.group_stats(g, 2)) for g in range(len(self._impl.groups()))]


class DDP(_Algorithm):
    """The dense baseline (trickle::ddp): after every `interval`-th step, every parameter is
    averaged over the workers, one fp32 sum of the whole model (deterministic: the same bits
    on every worker, run to run). With the face of the others (stats, hooks, state_dict, the
    initial broadcast, agreement), so that comparing a strategy with dense training changes
    one line. It averages parameters after the optimizer step, not gradients before it: with
    SGD the two are the same; with a stateful optimizer (Adam) each worker's moments follow
    its own gradients. CPU parameters (float32, float16, bfloat16). Options (keyword only):
{options}

    Methods: step(), add_hook(fn, every=1), state_dict(), load_state_dict(state).
    Properties: stats, group_stats, groups, options, group, rank, world_size.
    """

    _kind = "DDP"
    _factory = staticmethod(_C.ddp)

    def __init__(self, model, **options):
        """Builds the algorithm over `model` (collective: every worker, the same options); see the class docstring."""
        self._build(model, options)


for _cls in (SPARTA, DiLoCo, SPARTADiLoCo, DDP):
    _cls.__doc__ = _cls.__doc__.replace("{options}", _options_doc(_cls._kind))


def _signature(kind: str) -> inspect.Signature:
    params = [
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD),
    ]
    params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v) for k, v in _DEFAULTS[kind].items()]
    return inspect.Signature(params)


for _cls in (SPARTA, DiLoCo, SPARTADiLoCo, DDP):
    _cls.__init__.__signature__ = _signature(_cls._kind)
