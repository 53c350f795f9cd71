"""Per-device correction of the prior from (predicted, measured) pairs.

A prior entry calibrates on whole-model or kernel latencies:
``log(measured) = alpha + beta * log(predicted)`` by least squares
(``beta`` fixed to 1, a pure scale, below :data:`MIN_PAIRS_FOR_SLOPE`
pairs), stored in the device manifest as ``calibration``. It applies to the
kernels of the families its pairs held (``families``): a prediction's kernel
time in those families is corrected, its launch overhead and its time in
other families keep the prior's (a scale fitted on transformers says nothing
of convolutions, nor of the per-kernel cost of small models). Fit it on
kernel times: predicted and measured with the predicted launch overhead
taken out of both.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.graph.perfgraph import atomic_write_bytes

#: Fewer pairs than this fit a scale only (the slope would be noise).
MIN_PAIRS_FOR_SLOPE = 20


@dataclass(frozen=True)
class Correction:
    alpha: float
    beta: float
    pairs: int
    #: MAPE (%) of the prior and of the corrected prior on the fitting pairs.
    mape_before: float
    mape_after: float
    #: The kernel families the fitting pairs held (``KERNEL_FAMILIES`` names).
    families: tuple[str, ...]

    def apply(self, predicted_ms: np.ndarray | float) -> np.ndarray:
        p = np.maximum(np.asarray(predicted_ms, np.float64), 1e-12)
        return np.exp(self.alpha + self.beta * np.log(p))

    def total(self, family_ms: dict[str, float], launch_ms: dict[str, float] | None = None) -> float:
        """A prediction's corrected ms from its prior ms per kernel family
        (``launch_ms``: the launch overhead inside each): the covered
        families' kernel time (launches excluded) corrected, their launches
        and the other families added as they are. A scale fitted on large
        models says nothing of the fixed cost per kernel that small ones
        are made of."""
        launch_ms = launch_ms or {}
        body = sum(v - launch_ms.get(k, 0.0) for k, v in family_ms.items() if k in self.families)
        fixed = sum(v if k not in self.families else launch_ms.get(k, 0.0) for k, v in family_ms.items())
        return (float(self.apply(body)) if body > 0 else 0.0) + fixed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Every kernel family the prior prices (:mod:`perfseer_rt.gpu.kernels`).
KERNEL_FAMILIES = ("linear", "bmm", "conv", "elem", "ln", "softmax", "memory")


def fit_correction(predicted_ms: Any, measured_ms: Any,
                   families: tuple[str, ...] = KERNEL_FAMILIES) -> Correction:
    """Fit a correction from paired latencies (ms, both > 0) whose kernels
    were of ``families``.

    Raises:
        PerfSeerError: fewer than 3 pairs, mismatched lengths, or
            non-positive / non-finite values.
    """
    p = np.asarray(predicted_ms, np.float64).ravel()
    m = np.asarray(measured_ms, np.float64).ravel()
    if p.shape != m.shape:
        raise PerfSeerError(f"calibration: {p.size} predictions but {m.size} measurements")
    if p.size < 3:
        raise PerfSeerError(f"calibration needs at least 3 (predicted, measured) pairs, got {p.size}")
    if not (np.all(np.isfinite(p)) and np.all(np.isfinite(m)) and (p > 0).all() and (m > 0).all()):
        raise PerfSeerError("calibration: latencies must be finite and > 0")
    lp, lm = np.log(p), np.log(m)
    if p.size >= MIN_PAIRS_FOR_SLOPE and lp.std() > 1e-9:
        beta, alpha = np.polyfit(lp, lm, 1)
    else:
        beta, alpha = 1.0, float(np.mean(lm - lp))
    corr = Correction(float(alpha), float(beta), int(p.size), mape(p, m), 0.0, tuple(families))
    return Correction(corr.alpha, corr.beta, corr.pairs, corr.mape_before,
                      mape(corr.apply(p), m), corr.families)


def write_calibration(manifest_path: str | os.PathLike[str], correction: Correction,
                      source: str) -> None:
    """Store ``correction`` in a gpu-prior device manifest (atomically);
    ``source`` says which records it was fitted on."""
    path = Path(manifest_path)
    doc = json.loads(path.read_text())
    if doc.get("kind") != "gpu-prior":
        raise PerfSeerError(f"{path}: not a gpu-prior device entry")
    doc["calibration"] = correction.to_dict()
    doc["calibration_source"] = source
    atomic_write_bytes(path, json.dumps(doc, indent=1).encode())


def mape(pred: Any, meas: Any) -> float:
    """Mean absolute percentage error, %."""
    pred, meas = np.asarray(pred, np.float64), np.asarray(meas, np.float64)
    return float(np.mean(np.abs(pred - meas) / meas) * 100.0)
