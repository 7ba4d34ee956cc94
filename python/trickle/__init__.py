"""trickle: SPARTA sparse parameter averaging and DiLoCo for torch.distributed.

    import torch.distributed as dist, trickle
    dist.init_process_group("gloo")
    sparta = trickle.SPARTA(model, fraction=0.005, sampler="permutation", seed=42)
    ...
    optimizer.step()
    sparta.step()          # after optimizer.step(), never between forward and backward

Python bindings of the header-only C++ library trickle (include/trickle/torch/*.hpp):
every worker builds the same object over its replica of the model, and every call of
step(), state_dict() and load_state_dict() is collective. See python/README.md and
docs/python-api.md.
"""

from ._algorithms import (
    DiLoCo,
    SPARTA,
    SPARTADiLoCo,
    CODECS,
    OUTER_OPTIMIZERS,
    SAMPLERS,
    SCHEDULES,
    SPARSIFIERS,
    TOPOLOGIES,
    STATE_FORMAT,
)
from ._errors import CommError, MismatchError
from ._hooks import HookHandle
from ._stats import Aggregation, Stats
from ._elastic import Elastic, connect_store
from . import _C


def build_info() -> dict:
    """What this trickle extension was built with: trickle's version, the torch it was
    compiled against, the C++ compiler and standard, and whether it has CUDA (and NCCL)
    support; a CUDA tensor given to a build without it raises a ValueError that says so."""
    return dict(_C.build_info)


__all__ = [
    "SPARTA",
    "DiLoCo",
    "SPARTADiLoCo",
    "Stats",
    "Aggregation",
    "HookHandle",
    "MismatchError",
    "CommError",
    "Elastic",
    "connect_store",
    "SAMPLERS",
    "SCHEDULES",
    "TOPOLOGIES",
    "CODECS",
    "OUTER_OPTIMIZERS",
    "SPARSIFIERS",
    "STATE_FORMAT",
    "build_info",
]

__version__ = "0.1.0"
