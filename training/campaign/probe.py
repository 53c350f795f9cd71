"""A speed probe of the measuring core, taken beside every measurement.

On a small VM the other vCPU's work slows the pinned measuring core (shared
physical core or memory bandwidth: up to ~45 % and ~2x on a 1.7 ms model were
seen in the reference re-measures). The probe times a fixed piece of work
(float32 matrix products through numpy, ~1 ms each, cache-resident plus one
pass over a buffer larger than L2) right before and after each measurement;
records keep the median, ``quality.speed_probe_ms``, so disturbed latency
labels can be found afterwards (the probe's ratio to the campaign's median),
whatever the load average says.
"""

from __future__ import annotations

import time

import numpy as np

_RNG = np.random.default_rng(0)
_A = _RNG.standard_normal((192, 192)).astype(np.float32)
_BIG = _RNG.standard_normal(4 * 2**20 // 4).astype(np.float32)  # 4 MiB: beyond L2, within L3


def _once() -> float:
    t0 = time.perf_counter()
    b = _A @ _A
    b = b @ _A
    float(_BIG.sum()) + float(b[0, 0])
    return (time.perf_counter() - t0) * 1e3


def speed_probe(reps: int = 9) -> float:
    """Median wall time of the probe's work, ms (lower = faster core)."""
    _once()  # warm
    return float(np.median([_once() for _ in range(reps)]))
