"""The kernels of one step as a runtime launches them: a table of arrays.

Built by :mod:`perfseer_rt.gpu.eager` (forward) and
:mod:`perfseer_rt.gpu.backward` (training step), priced by
:mod:`perfseer_rt.gpu.pricing`, corrected by :mod:`perfseer_rt.gpu.learned`.

Columns (one value per kernel, launch order):

* ``cls``: what the kernel is (:data:`CLASSES`), finer than the prior's
  families (a depthwise conv, fused attention, a cast, a folded BatchNorm
  PyTorch runs apart...);
* ``family``: the prior family that prices it (``linear``, ``bmm``,
  ``conv``, ``elem``, ``ln``, ``softmax``, ``memory``);
* ``peak``: the math the kernel runs on: ``fp32``, ``tf32``, ``fp16``,
  ``bf16`` (tensor-core rates for the last three), ``none`` (memory-bound
  kernels: bandwidth only);
* ``phase``: ``forward``, ``backward``, ``loss`` or ``optimizer``;
* ``node``: the PerfGraph node it comes from (-1: none, e.g. an optimizer);
* ``flops`` (FLOPs) and ``bytes`` (bytes read + written, at the dtypes the
  precision gives each tensor);
* ``batch``, ``m``, ``n``, ``k``: the GEMM view (GEMM-like kernels; 0 else);
  ``rows``, ``cols``: the row view (row kernels; 0 else); ``binary``,
  ``transcendental``: element-wise flags;
* ``launches``: kernel launches it stands for (a fused attention priced as
  two GEMM halves counts 0.5 each);
* ``host_ops``: framework ops the host dispatches for it (views included).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Kernel classes (``cls``), each priced by the prior family in the value.
CLASSES: dict[str, str] = {
    "linear": "linear", "bmm": "bmm", "conv": "conv", "attention": "bmm",
    "conv_grouped": "memory", "pool": "memory", "norm_bn": "memory", "copy": "memory",
    "cast": "memory", "reduce": "memory", "memory": "memory",
    "elem": "elem", "ln": "ln", "softmax": "softmax",
    "optimizer": "memory",
}
NUMERIC = ("node", "flops", "bytes", "batch", "m", "n", "k", "rows", "cols", "binary",
           "transcendental", "launches", "host_ops")
TEXT = ("cls", "family", "peak", "phase")


@dataclass
class KernelTable:
    """Kernels in launch order (see the module doc for the columns)."""

    cols: dict[str, np.ndarray] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.cols["flops"]) if self.cols else 0

    def __getitem__(self, key: str) -> np.ndarray:
        return self.cols[key]

    @property
    def launches(self) -> float:
        return float(self.cols["launches"].sum()) if self.cols else 0.0

    def select(self, mask: np.ndarray) -> "KernelTable":
        return KernelTable({k: v[mask] for k, v in self.cols.items()}, list(self.notes))

    @classmethod
    def concat(cls, tables: list["KernelTable"]) -> "KernelTable":
        tables = [t for t in tables if len(t)]
        if not tables:
            return empty()
        notes: list[str] = []
        for t in tables:
            notes += [n for n in t.notes if n not in notes]
        return cls({k: np.concatenate([t.cols[k] for t in tables]) for k in tables[0].cols}, notes)


def empty() -> KernelTable:
    return KernelTable({**{k: np.zeros(0) for k in NUMERIC}, **{k: np.zeros(0, object) for k in TEXT}})


class Builder:
    """Collects kernels row by row, then :meth:`table`."""

    def __init__(self, phase: str) -> None:
        self.phase = phase
        self.rows: list[dict[str, Any]] = []

    def add(self, cls: str, node: int, flops: float, nbytes: float, peak: str = "none", *,
            launches: float = 1.0, host_ops: float = 1.0, **shape: float) -> None:
        """One kernel of class ``cls`` (GEMM view ``batch, m, n, k`` or row
        view ``rows, cols, binary, transcendental`` in ``shape``)."""
        if cls not in CLASSES:
            raise ValueError(f"unknown kernel class {cls!r}")
        row: dict[str, Any] = {k: 0.0 for k in NUMERIC}
        row.update(shape)
        row.update(node=float(node), flops=float(max(flops, 0.0)), bytes=float(max(nbytes, 0.0)),
                   launches=launches, host_ops=host_ops)
        row.update(cls=cls, family=CLASSES[cls], peak=peak, phase=self.phase)
        self.rows.append(row)

    def table(self, notes: list[str] | None = None) -> KernelTable:
        if not self.rows:
            t = empty()
            t.notes = list(notes or [])
            return t
        cols: dict[str, np.ndarray] = {k: np.array([r[k] for r in self.rows], np.float64) for k in NUMERIC}
        cols.update({k: np.array([r[k] for r in self.rows], object) for k in TEXT})
        return KernelTable(cols, list(notes or []))
