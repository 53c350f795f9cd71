"""Record every tensor allocation and free of a PyTorch run, in order.

Method: a :class:`~torch.utils._python_dispatch.TorchDispatchMode` sees the
outputs of every ATen operator that runs below autograd (forward, backward,
optimizer, autocast casts); each output whose storage is new is an
allocation of ``storage.nbytes()`` bytes, and a ``weakref.finalize`` on the
storage's Python object records its free (PyTorch preserves a storage's
Python object while its C++ storage lives, so the callback fires when the
memory is released). Views and in-place results share a storage and are not
allocations. What a kernel allocates internally and frees before returning
(CPU scratch buffers, cuDNN/cuBLAS workspaces on a GPU) is not an operator
output and is not seen: the trace is what a caching allocator is asked for
by tensors, which on a GPU is ``torch.cuda.max_memory_allocated`` less the
library workspaces.

Each event is ``(kind, key, nbytes, phase, op)``: ``kind`` ``+`` or ``-``;
``phase`` the label set by :meth:`AllocTrace.phase` at that moment.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


@dataclass
class Event:
    kind: str      #: "+" allocation, "-" free
    key: int       #: storage identity (StorageImpl address while alive)
    nbytes: int
    phase: str
    op: str


@dataclass
class AllocTrace(TorchDispatchMode):
    """The recording mode (use as a context manager)."""

    events: list[Event] = field(default_factory=list)
    live: dict[int, int] = field(default_factory=dict)      #: key -> nbytes
    label: dict[int, str] = field(default_factory=dict)     #: key -> category of pre-existing storages
    current: dict[int, Event] = field(default_factory=dict) #: key -> its live allocation event
    current_phase: str = "setup"
    recording: bool = True

    def __post_init__(self) -> None:
        super().__init__()

    # ------------------------------------------------------------- registry
    def adopt(self, tensors: Any, category: str) -> None:
        """Count storages that exist before recording (parameters, buffers,
        the batch) as live, labelled ``category``; they are never freed in
        the trace unless Python drops them."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                self._track(t, f"<{category}>", category)

    def _track(self, t: torch.Tensor, op: str, category: str | None = None) -> None:
        if t.device.type == "meta" or t.is_sparse:
            return
        st = t.untyped_storage()
        n = int(st.nbytes())
        if n == 0:
            return
        key = int(st._cdata)
        if key in self.live:
            return
        self.live[key] = n
        if category:
            self.label[key] = category
        ev = Event("+", key, n, self.current_phase, op)
        self.events.append(ev)
        self.current[key] = ev
        weakref.finalize(st, self._freed, key)

    def event_of(self, t: torch.Tensor) -> Event | None:
        """The allocation event of ``t``'s storage, if it is being tracked."""
        return self.current.get(int(t.untyped_storage()._cdata))

    def _freed(self, key: int) -> None:
        n = self.live.pop(key, None)
        if n is not None and self.recording:
            self.events.append(Event("-", key, n, self.current_phase, ""))

    # --------------------------------------------------------------- hooks
    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        old, self.current_phase = self.current_phase, name
        try:
            yield
        finally:
            self.current_phase = old

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(func)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._track(t, name)
        return out


def peak(events: list[Event], start: int = 0) -> tuple[int, int, int]:
    """(peak live bytes, index of the event reaching it, live bytes before
    ``events[start]``) over the trace."""
    live = 0
    base = 0
    best, at = 0, 0
    for i, e in enumerate(events):
        live += e.nbytes if e.kind == "+" else -e.nbytes
        if i == start - 1:
            base = live
        if i >= start and live > best:
            best, at = live, i
    return best, at, base


def live_at(events: list[Event], index: int) -> dict[int, Event]:
    """The allocation events still live after ``events[index]``."""
    alive: dict[int, Event] = {}
    for e in events[: index + 1]:
        if e.kind == "+":
            alive[e.key] = e
        else:
            alive.pop(e.key, None)
    return alive
