"""Step hooks: add_hook(fn, every=k) on the algorithms, and the handle that removes one.

Modelled on torch's register_*_hook: hooks run in the order they were added, a hook added
or removed by a hook takes effect from the next step, the handle's remove() is idempotent
and the handle holds no reference to the algorithm (a weak one to its hook table), so
keeping a handle does not keep the algorithm alive.
"""

from __future__ import annotations

import itertools
import numbers
import weakref
from collections import OrderedDict
from typing import Any, Callable, Optional

_ids = itertools.count()


class HookHandle:
    """What add_hook() returns: remove() unregisters the hook (a second call does nothing).
    Also a context manager: `with algo.add_hook(fn): ...` removes the hook on exit."""

    __slots__ = ("_table", "id", "__weakref__")

    def __init__(self, table: "OrderedDict[int, Any]", hook_id: int):
        self._table = weakref.ref(table)
        self.id = hook_id

    def remove(self) -> None:
        """Unregisters the hook; nothing happens if it is already removed (or its algorithm gone)."""
        table = self._table()
        if table is not None:
            table.pop(self.id, None)

    @property
    def active(self) -> bool:
        """Whether the hook is still registered."""
        table = self._table()
        return table is not None and self.id in table

    def __enter__(self) -> "HookHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"trickle.HookHandle(id={self.id}, {'active' if self.active else 'removed'})"


HookHandle.__module__ = "trickle"


class _HookTable:
    """The hooks of one algorithm object, by id, in registration order."""

    __slots__ = ("hooks",)

    def __init__(self):
        self.hooks: "OrderedDict[int, Any]" = OrderedDict()

    def add(self, kind: str, fn: Callable, every: Any) -> HookHandle:
        if not callable(fn):
            raise TypeError(f"trickle.{kind}.add_hook: the hook must be callable as fn(step, stats), "
                            f"got {type(fn).__name__}")
        if not isinstance(every, numbers.Integral) or isinstance(every, bool):
            raise TypeError(f"trickle.{kind}.add_hook: every must be an int, got {type(every).__name__}")
        if every < 1:
            raise ValueError(f"trickle.{kind}.add_hook: every must be >= 1, got {every}")
        hook_id = next(_ids)
        self.hooks[hook_id] = (fn, int(every))
        return HookHandle(self.hooks, hook_id)

    def __bool__(self) -> bool:
        return bool(self.hooks)

    def run(self, steps: int, stats: Callable[[], Any]) -> None:
        """Calls every hook due at `steps` (steps % every == 0) with (steps, stats), the stats
        made once, on demand. A hook's exception propagates at once: the hooks after it are
        not called for this step."""
        made: Optional[Any] = None
        for fn, every in list(self.hooks.values()):  # a snapshot: hooks may add or remove hooks
            if steps % every:
                continue
            if made is None:
                made = stats()
            fn(steps, made)
