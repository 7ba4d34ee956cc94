"""trickle: SPARTA sparse parameter averaging and DiLoCo for torch.distributed.

    import torch.distributed as dist, trickle
    dist.init_process_group("gloo")
    sparta = trickle.SPARTA(model, fraction=0.005, sampler="permutation", seed=42)
    ...
    optimizer.step()
    sparta.step()          # after optimizer.step(), never between forward and backward

Python bindings of the header-only C++ library trickle (include/trickle/torch/*.hpp):
every worker builds the same object over its replica of the model, and every call of
step(), state_dict() and load_state_dict() is collective. See python/README.md.
"""

from ._algorithms import (
    DiLoCo,
    SPARTA,
    SPARTADiLoCo,
    Stats,
    CODECS,
    OUTER_OPTIMIZERS,
    SAMPLERS,
    SCHEDULES,
    TOPOLOGIES,
    STATE_FORMAT,
)
from ._errors import CommError, MismatchError
from ._elastic import Elastic, connect_store

__all__ = [
    "SPARTA",
    "DiLoCo",
    "SPARTADiLoCo",
    "Stats",
    "MismatchError",
    "CommError",
    "Elastic",
    "connect_store",
    "SAMPLERS",
    "SCHEDULES",
    "TOPOLOGIES",
    "CODECS",
    "OUTER_OPTIMIZERS",
    "STATE_FORMAT",
]

__version__ = "0.1.0"
