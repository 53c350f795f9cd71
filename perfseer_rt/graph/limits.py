"""Bounds on extraction: batch and dim ranges, tensor sizes, node cap, time.

Every bound is checked before the arithmetic it protects, and breaking one
is a typed error (:class:`~perfseer_rt.errors.ShapeError`,
:class:`~perfseer_rt.errors.GraphError` or
:class:`~perfseer_rt.errors.LimitError`), never a hang or a silent number.
"""

from __future__ import annotations

import time

from perfseer_rt.errors import LimitError

#: ``--batch`` range (inclusive).
MIN_BATCH, MAX_BATCH = 1, 65536
#: Largest value a resolved input dim may take (``--dim``/``--input``/the
#: model): 2^20. onnx's shape inference slows with dim values (a Swin input
#: 2^20 wide infers in ~2 CPU-s, 2^31 wide did not finish in minutes).
MAX_DIM = 2**20
#: Largest element count of any one tensor (2^40, ~1.1 T elements): larger
#: is not a real model, and keeps every feature finite in float64.
MAX_ELEMS = 2**40
#: Longest 1-D integer tensor without data (graph input or external
#: initializer): onnx's inference gives a Reshape/Expand fed by one that
#: many dims, so a longer one would stall it.
MAX_SHAPE_LEN = 1 << 20
#: Most dims a tensor may have (numpy's limit; no real model comes near it):
#: onnx's data propagation inferred a rank of 1,048,579 for a fuzzed Swin's
#: Reshape and spent ~1.7 CPU-s a round on it (fuzz seed 20 case 2586).
MAX_RANK = 64
#: Largest pad/stride/dilation/kernel attribute accepted on a conv or pool.
MAX_SPATIAL_ATTR = 2**20
#: Node cap (main graph and subgraphs together), by default.
MAX_NODES = 1_000_000
#: Time limit of one extraction in CPU seconds, by default.
TIME_LIMIT_S = 60.0
#: Constant tensors larger than this are never materialised while folding
#: shape subgraphs (they carry no shape information worth their cost).
MAX_CONST_ELEMS = 1 << 16


class Deadline:
    """A CPU-time budget checked between (and inside) extraction phases."""

    def __init__(self, seconds: float | None, name: str):
        self.name = name
        self.seconds = seconds
        self._end = None if seconds is None else time.process_time() + seconds

    def check(self, phase: str) -> None:
        """Raise :class:`LimitError` when the budget is spent."""
        if self._end is not None and time.process_time() > self._end:
            raise LimitError(f"{self.name}: extraction exceeded its time limit of "
                             f"{self.seconds:g} CPU-s during {phase}; pass a larger "
                             "time_limit if the model is really this large")
