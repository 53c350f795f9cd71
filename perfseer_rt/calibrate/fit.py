"""The correction a calibration fits: base prediction -> local measurement.

For each metric, in log space: ``log(measured) = a + b * log(predicted)``
(``"power"``), or ``b = 1`` (``"scale"``: one factor). Which of the two is
kept is decided by leave-one-out error on the reference models, and that
leave-one-out error (MAPE, % and the share within +-10 %) is the calibrated
predictor's error estimate: every reference model is predicted by a
correction fitted without it.
"""

from __future__ import annotations

import numpy as np

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.predict.correction import Correction

KINDS = ("scale", "power")


def _fit(kind: str, lp: np.ndarray, ly: np.ndarray) -> tuple[float, float]:
    if kind == "scale":
        return float(np.mean(ly - lp)), 1.0
    b, a = np.polyfit(lp, ly, 1)
    return float(a), float(b)


def _loo(kind: str, lp: np.ndarray, ly: np.ndarray) -> np.ndarray:
    out = np.empty(len(ly))
    for i in range(len(ly)):
        m = np.arange(len(ly)) != i
        a, b = _fit(kind, lp[m], ly[m])
        c = np.clip(lp[i], lp[m].min(), lp[m].max())  # as Correction.apply: no slope beyond the fitted range
        out[i] = a + b * c + (lp[i] - c)
    return np.exp(out)


def fit_correction(metric: str, predicted: np.ndarray, measured: np.ndarray) -> Correction:
    """Fit on paired base predictions and measurements (same unit, all > 0).

    Raises:
        PerfSeerError: fewer than 3 pairs, or a value that is not positive.
    """
    p, y = np.asarray(predicted, np.float64), np.asarray(measured, np.float64)
    if len(y) < 3:
        raise PerfSeerError(f"{metric}: calibration needs at least 3 measured models, got {len(y)}")
    if not (np.all(p > 0) and np.all(y > 0) and np.all(np.isfinite(p)) and np.all(np.isfinite(y))):
        raise PerfSeerError(f"{metric}: predictions and measurements must be positive numbers")
    lp, ly = np.log(p), np.log(y)
    errs = {k: np.abs(_loo(k, lp, ly) / y - 1.0) for k in KINDS}
    # a slope <= 0 (measurements falling as predictions rise) is noise, not a correction
    kinds = [k for k in KINDS if k == "scale" or _fit(k, lp, ly)[1] > 0]
    kind = min(kinds, key=lambda k: float(np.mean(errs[k])))
    a, b = _fit(kind, lp, ly)
    e = errs[kind]
    return Correction(metric, kind, a, b, len(y), float(100 * e.mean()), float(100 * (e <= 0.10).mean()),
                      float(100 * np.mean(np.abs(p / y - 1.0))), float(p.min()), float(p.max()))
