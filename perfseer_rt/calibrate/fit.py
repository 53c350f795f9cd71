"""The correction a calibration fits: base prediction -> local measurement.

For each metric, in log space: ``log(measured) = a + b * log(predicted)``
(``"power"``), or ``b = 1`` (``"scale"``: one factor). Which of the two is
kept is decided by leave-one-out error on the reference models, and that
leave-one-out error (MAPE, % and the share within +-10 %) is the calibrated
predictor's error estimate: every reference model is predicted by a
correction fitted without it. Its 90 % quantile in log space is kept as a
width: the calibrated entry keeps the base's intervals, each side widened
by it in quadrature (:func:`perfseer_rt.predict.uncertainty.widened`).
"""

from __future__ import annotations

import numpy as np

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.predict.correction import Correction

#: Coverage of the width kept from the leave-one-out errors (:attr:`Correction.cv_log_q90`).
WIDTH_COVERAGE = 0.9

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
    loo = {k: _loo(k, lp, ly) for k in KINDS}
    errs = {k: np.abs(loo[k] / y - 1.0) for k in KINDS}
    # a slope <= 0 (measurements falling as predictions rise) is noise, not a correction
    kinds = [k for k in KINDS if k == "scale" or _fit(k, lp, ly)[1] > 0]
    kind = min(kinds, key=lambda k: float(np.mean(errs[k])))
    a, b = _fit(kind, lp, ly)
    e = errs[kind]
    return Correction(metric, kind, a, b, len(y), float(100 * e.mean()), float(100 * (e <= 0.10).mean()),
                      float(100 * np.mean(np.abs(p / y - 1.0))), float(p.min()), float(p.max()),
                      conformal_width(np.abs(np.log(loo[kind] / y)), WIDTH_COVERAGE))


def conformal_width(abs_log_errors: np.ndarray, coverage: float) -> float:
    """The split-conformal ``coverage`` quantile of absolute log errors: the
    ``ceil((n + 1) * coverage)``-th smallest (the largest when that exceeds n)."""
    r = np.sort(np.asarray(abs_log_errors, dtype=np.float64))
    return float(r[min(len(r), int(np.ceil((len(r) + 1) * coverage))) - 1])
