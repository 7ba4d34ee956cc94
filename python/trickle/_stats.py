"""trickle.Stats: one worker's traffic account, as trickle::exchange_stats counts it.

A small read-only record: attribute access (stats.bytes_sent), key access
(stats["bytes_sent"]), dict(stats) and stats.as_dict() for loggers, a repr with every field
and a short str() for a progress line, equality, and pickling.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Dict, Iterator, Optional


def _bytes_text(n: int) -> str:
    """n bytes in decimal units: 512 B, 12.6 kB, 3.40 MB, 1.25 GB."""
    if n < 1000:
        return f"{n} B"
    for unit, size in (("kB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12)):
        if n < size * 1000 or unit == "TB":
            v = n / size
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


class Stats:
    """One worker's traffic account (trickle::exchange_stats), read-only.

    Fields (attributes, and keys: stats["bytes_sent"]; dict(stats) and stats.as_dict() give
    a plain dict, in this order):
      steps, exchanges          step() calls, and those that communicated
      values                    values this worker put on the wire, over all exchanges
      bytes_sent, bytes_received, calls    over all exchanges
      last_bytes_sent, last_bytes_received, last_calls, last_values   the latest exchange
      dense_bytes               what a dense fp32 all-reduce of all parameters at every
                                step would have sent, under the same cost model
      reduction                 dense_bytes / bytes_sent (0.0 before anything was sent)
      initial_bytes_sent, initial_bytes_received, initial_calls   the initial broadcast at
                                construction (not part of the totals above)
      code_bytes_sent, scale_bytes_sent, index_bytes_sent, padding_bytes_sent
                                bytes_sent by part: codes (plain fp32 values too), per-block
                                scales (and DiLoCo's weight sum, when the outer gradient is
                                encoded), a sparsifier's indices, and padding; they sum to
                                bytes_sent
    Every field is an int but reduction (a float). repr() shows every field; str() is a
    short progress line. Stats(mapping) or Stats(**fields) builds one (every field needed).
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
    __slots__ = FIELDS
    __match_args__ = FIELDS

    def __init__(self, fields: Optional[Mapping] = None, /, **kwargs: Any):
        """Stats(mapping) or Stats(**fields): every field is needed."""
        if fields is not None and not isinstance(fields, Mapping):
            raise TypeError(f"trickle.Stats: expected a mapping of the fields, got {type(fields).__name__}")
        given = {**(fields or {}), **kwargs}
        missing = [k for k in self.FIELDS if k not in given]
        if missing:
            raise TypeError(f"trickle.Stats: missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
        unknown = sorted(set(kwargs) - set(self.FIELDS))
        if unknown:
            raise TypeError(f"trickle.Stats: unknown field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                            f"fields: {', '.join(self.FIELDS)}")
        for k in self.FIELDS:
            object.__setattr__(self, k, float(given[k]) if k == "reduction" else int(given[k]))

    def __setattr__(self, name, value):
        raise AttributeError("trickle.Stats is read-only")

    def __delattr__(self, name):
        raise AttributeError("trickle.Stats is read-only")

    def __getattr__(self, name):  # only for names that are not fields
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"trickle.Stats has no field {name!r}; fields: {', '.join(self.FIELDS)}")

    # -- mapping-like access, for loggers --

    def __getitem__(self, key: str):
        """A field by name: stats["bytes_sent"]."""
        if key not in self.FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key) -> bool:
        return key in self.FIELDS

    def keys(self):
        """The field names, in order (so that dict(stats) works)."""
        return self.FIELDS

    def __iter__(self) -> Iterator[str]:
        return iter(self.FIELDS)

    def __len__(self) -> int:
        return len(self.FIELDS)

    def as_dict(self) -> Dict[str, Any]:
        """The fields as a plain dict (for loggers: wandb.log(stats.as_dict()))."""
        return {k: getattr(self, k) for k in self.FIELDS}

    # -- comparison, pickling, printing --

    def __eq__(self, other):
        if isinstance(other, Stats):
            return self.as_dict() == other.as_dict()
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):
        return (Stats, (self.as_dict(),))

    def __repr__(self) -> str:
        return "trickle.Stats(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.FIELDS) + ")"

    def __str__(self) -> str:
        """A progress line: steps, exchanges, bytes each way and the reduction."""
        sent = _bytes_text(self.bytes_sent)
        if self.reduction > 0:
            sent += f" ({self.reduction:.1f}x less than dense)"
        return (f"{_count(self.steps, 'step')}, {_count(self.exchanges, 'exchange')}, sent {sent}, "
                f"received {_bytes_text(self.bytes_received)}")


Stats.__module__ = "trickle"


class Aggregation:
    """How DiLoCo's outer steps combined the workers' contributions (trickle::aggregation_stats;
    docs/robustness.md), read-only: the same on every worker.

    Fields (attributes, and keys: agg["excluded"]; dict(agg) and agg.as_dict() give a plain
    dict, in this order):
      rule                      the rule's name: mean, trimmed:K, median or clip:TAU
      rounds                    outer rounds aggregated so far
      weights                   each worker's weight in the last round (0: dropped or excluded)
      norm                      each worker's ||delta_i||, its unweighted outer gradient, in the
                                last round (inf or nan: non-finite)
      distance                  ||delta_i - aggregate|| per worker (robust rules, workers taking
                                part; nan otherwise)
      trimmed_fraction          trimmed:K: per worker, the fraction of coordinates where it was
                                dropped
      clipped                   the ranks clipped (clip) or dropped in most coordinates (trimmed)
                                in the last round
      excluded                  the ranks excluded in the last round: a non-finite contribution
      clipped_total, excluded_total   clipped entries and exclusions over all rounds
      skipped                   rounds skipped because every contribution was excluded
    The per-worker fields are lists in rank order (empty before the first outer step);
    rule is a str, the counts ints. Aggregation(mapping) or Aggregation(**fields) builds one
    (every field needed).
    """

    FIELDS = (
        "rule",
        "rounds",
        "weights",
        "norm",
        "distance",
        "trimmed_fraction",
        "clipped",
        "excluded",
        "clipped_total",
        "excluded_total",
        "skipped",
    )
    _LISTS = {"weights": float, "norm": float, "distance": float, "trimmed_fraction": float, "clipped": int,
              "excluded": int}
    __slots__ = FIELDS
    __match_args__ = FIELDS

    def __init__(self, fields: Optional[Mapping] = None, /, **kwargs: Any):
        """Aggregation(mapping) or Aggregation(**fields): every field is needed."""
        if fields is not None and not isinstance(fields, Mapping):
            raise TypeError(f"trickle.Aggregation: expected a mapping of the fields, got {type(fields).__name__}")
        given = {**(fields or {}), **kwargs}
        missing = [k for k in self.FIELDS if k not in given]
        if missing:
            raise TypeError(f"trickle.Aggregation: missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
        unknown = sorted(set(kwargs) - set(self.FIELDS))
        if unknown:
            raise TypeError(f"trickle.Aggregation: unknown field{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(unknown)}; fields: {', '.join(self.FIELDS)}")
        for k in self.FIELDS:
            v = given[k]
            if k == "rule":
                v = str(v)
            elif k in self._LISTS:
                v = [self._LISTS[k](x) for x in v]
            else:
                v = int(v)
            object.__setattr__(self, k, v)

    def __setattr__(self, name, value):
        raise AttributeError("trickle.Aggregation is read-only")

    def __delattr__(self, name):
        raise AttributeError("trickle.Aggregation is read-only")

    def __getattr__(self, name):  # only for names that are not fields
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"trickle.Aggregation has no field {name!r}; fields: {', '.join(self.FIELDS)}")

    def __getitem__(self, key: str):
        """A field by name: agg["excluded"]."""
        if key not in self.FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key) -> bool:
        return key in self.FIELDS

    def keys(self):
        """The field names, in order (so that dict(agg) works)."""
        return self.FIELDS

    def __iter__(self) -> Iterator[str]:
        return iter(self.FIELDS)

    def __len__(self) -> int:
        return len(self.FIELDS)

    def as_dict(self) -> Dict[str, Any]:
        """The fields as a plain dict (the lists copied)."""
        return {k: (list(v) if isinstance(v, list) else v) for k, v in ((k, getattr(self, k)) for k in self.FIELDS)}

    def _key(self):
        # nan (a non-finite norm, the distance of a worker not taking part) equals nan here:
        # two records of the same round compare equal.
        def same(x):
            return ("nan",) if isinstance(x, float) and math.isnan(x) else x

        return tuple([same(x) for x in v] if isinstance(v, list) else v for v in (getattr(self, k) for k in self.FIELDS))

    def __eq__(self, other):
        if isinstance(other, Aggregation):
            return self._key() == other._key()
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):
        return (Aggregation, (self.as_dict(),))

    def __repr__(self) -> str:
        return "trickle.Aggregation(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.FIELDS) + ")"

    def __str__(self) -> str:
        """A short line: the rule, the rounds, and who was clipped or excluded last."""
        s = f"{self.rule}, {_count(self.rounds, 'round')}"
        if self.excluded:
            s += f", excluded {self.excluded}"
        if self.clipped:
            s += f", clipped {self.clipped}"
        if self.skipped:
            s += f", {self.skipped} skipped"
        return s


Aggregation.__module__ = "trickle"
