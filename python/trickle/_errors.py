"""trickle's exception classes (created by the C++ extension, re-exported here).

- trickle::invalid_argument  -> ValueError
- trickle::mismatch_error    -> trickle.MismatchError (a ValueError): workers disagree on the
                                configuration, the model's layout or the checkpoint's step
- trickle::comm_error        -> trickle.CommError (a RuntimeError): a collective failed
                                (a peer left, a timeout, ranks called with different sizes)
"""

import torch  # noqa: F401  (loads libtorch and registers c10d's Python types before _C)
import torch.distributed  # noqa: F401

from . import _C

MismatchError = _C.MismatchError
CommError = _C.CommError

for _cls in (MismatchError, CommError):
    _cls.__module__ = "trickle"

MismatchError.__doc__ = (
    "Workers disagree about the configuration, the model's parameters, or a checkpoint (a ValueError). "
    "Raised on every worker at once."
)
CommError.__doc__ = "A collective operation failed: a peer left, a timeout, or ranks that called differently."
