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
    DDP,
    CODECS,
    OUTER_OPTIMIZERS,
    SAMPLERS,
    SCHEDULES,
    SPARSIFIERS,
    TOPOLOGIES,
    STATE_FORMAT,
)
from ._demo import DeMo
from ._errors import CommError, MismatchError
from ._hooks import HookHandle
from ._stats import Aggregation, Stats
from ._elastic import Elastic, connect_store
from . import _C


def build_info() -> dict:
    """What this trickle extension was built with.

    Keys: ``trickle`` (its version), ``torch`` (the torch it was compiled against), ``cuda``
    (whether it takes CUDA tensors), ``cuda_version`` (the toolkit its CUDA kernels were
    compiled with, or None), ``cuda_archs`` (the GPU architectures they were compiled for,
    or None), ``nccl`` (trickle's own NCCL communicator: never in the package; over CUDA
    tensors the bytes go through the trainer's torch.distributed group, NCCL when its
    backend is), ``gloo``, ``cxx`` and ``cplusplus`` (the C++ compiler and standard), and
    ``codecs`` (the codec names it knows). A CUDA tensor given to a build without CUDA
    raises a ValueError that says how to rebuild."""
    info = dict(_C.build_info)
    info["codecs"] = tuple(CODECS)
    return info


__all__ = [
    "SPARTA",
    "DiLoCo",
    "SPARTADiLoCo",
    "DDP",
    "DeMo",
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
