"""The correction a calibration fits: base prediction -> local measurement.

For each metric, one of

* ``"scale"``: one factor, ``log(measured) = a + log(predicted)``;
* ``"power"``: ``log(measured) = a + b * log(predicted)``;
* ``"kinds"`` (latency, when the graphs' work per kind is given):
  ``measured = predicted * sum_k r_k * share_k``, a ratio of this machine
  to the base device per kind of work (:mod:`perfseer_rt.calibrate.kinds`),
  non-negative, fitted on relative errors with a pull of weight
  :data:`RIDGE` toward the common factor (a kind the reference models
  barely hold keeps about the common factor).

Which one is kept is decided by leave-one-out error on the reference
models, and that leave-one-out error (MAPE, % and the share within
+-10 %) is the calibrated predictor's error estimate: every reference model
is predicted by a correction fitted without it. Its 90 % quantile in log
space is kept as a width: the calibrated entry keeps the base's intervals,
each side widened by it in quadrature
(:func:`perfseer_rt.predict.uncertainty.widened`).
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from perfseer_rt.calibrate.kinds import KINDS, shares
from perfseer_rt.errors import PerfSeerError
from perfseer_rt.predict.correction import Correction

#: Coverage of the width kept from the leave-one-out errors (:attr:`Correction.cv_log_q90`).
WIDTH_COVERAGE = 0.9
#: Pull of each kind's ratio toward the common factor, per reference model
#: (a relative deviation of 1 costs as much as ``RIDGE * n`` models off by 100 %).
RIDGE = 0.02

KINDS_OF_FIT = ("scale", "power", "kinds")


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares ``min |a x - b|, x >= 0`` for a few columns
    (exact: every set of free columns is tried)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    k = a.shape[1]
    best, best_res = np.zeros(k), float(b @ b)
    for size in range(1, k + 1):
        for cols in itertools.combinations(range(k), size):
            x, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
            if np.all(x >= 0):
                full = np.zeros(k)
                full[list(cols)] = x
                r = a @ full - b
                res = float(r @ r)
                if res < best_res:
                    best, best_res = full, res
    return best


def fit_ratios(p: np.ndarray, y: np.ndarray, share_rows: np.ndarray, ridge: float = RIDGE) -> np.ndarray:
    """Per-kind ratios ``r`` with ``y ~ p * (share_rows @ r)``, relative
    errors, pulled toward the common factor ``exp(mean(log(y / p)))``."""
    n, k = share_rows.shape
    r0 = float(np.exp(np.mean(np.log(y / p))))
    a = share_rows * (p / y)[:, None]
    w = np.sqrt(ridge * n)
    a_aug = np.vstack([a, w / r0 * np.eye(k)])
    b_aug = np.concatenate([np.ones(n), np.full(k, w)])
    return nnls(a_aug, b_aug)


def _fit(kind: str, lp: np.ndarray, ly: np.ndarray) -> tuple[float, float]:
    if kind == "scale":
        return float(np.mean(ly - lp)), 1.0
    b, a = np.polyfit(lp, ly, 1)
    return float(a), float(b)


def _loo(kind: str, lp: np.ndarray, ly: np.ndarray, s: np.ndarray | None, ridge: float) -> np.ndarray:
    out = np.empty(len(ly))
    for i in range(len(ly)):
        m = np.arange(len(ly)) != i
        if kind == "kinds":
            assert s is not None
            r = fit_ratios(np.exp(lp[m]), np.exp(ly[m]), s[m], ridge)
            out[i] = lp[i] + np.log(max(float(s[i] @ r), 1e-12))
            continue
        a, b = _fit(kind, lp[m], ly[m])
        c = np.clip(lp[i], lp[m].min(), lp[m].max())  # as Correction.apply: no slope beyond the fitted range
        out[i] = a + b * c + (lp[i] - c)
    return np.exp(out)


def fit_correction(metric: str, predicted: np.ndarray, measured: np.ndarray,
                   works: np.ndarray | None = None, theta: np.ndarray | None = None,
                   kinds: Sequence[str] = KINDS_OF_FIT, ridge: float = RIDGE,
                   threads: int | None = None) -> Correction:
    """Fit on paired base predictions and measurements (same unit, all > 0);
    ``works`` (``[n, len(KINDS)]``) and the base's per-kind costs ``theta``
    make the ``"kinds"`` fit possible; ``kinds``: the candidates.

    Raises:
        PerfSeerError: fewer than 3 pairs, or a value that is not positive.
    """
    p, y = np.asarray(predicted, np.float64), np.asarray(measured, np.float64)
    if len(y) < 3:
        raise PerfSeerError(f"{metric}: calibration needs at least 3 measured models, got {len(y)}")
    if not (np.all(p > 0) and np.all(y > 0) and np.all(np.isfinite(p)) and np.all(np.isfinite(y))):
        raise PerfSeerError(f"{metric}: predictions and measurements must be positive numbers")
    s = shares(works, theta) if works is not None and theta is not None else None
    candidates = [k for k in kinds if k != "kinds" or (s is not None and len(y) > len(KINDS))]
    lp, ly = np.log(p), np.log(y)
    loo = {k: _loo(k, lp, ly, s, ridge) for k in candidates}
    errs = {k: np.abs(loo[k] / y - 1.0) for k in candidates}
    # a slope <= 0 (measurements falling as predictions rise) is noise, not a correction
    candidates = [k for k in candidates if k != "power" or _fit(k, lp, ly)[1] > 0]
    kind = min(candidates, key=lambda k: float(np.mean(errs[k])))
    e = errs[kind]
    common = dict(metric=metric, kind=kind, count=len(y), cv_mape=float(100 * e.mean()),
                  cv_within_10=float(100 * (e <= 0.10).mean()), base_mape=float(100 * np.mean(np.abs(p / y - 1.0))),
                  fit_min=float(p.min()), fit_max=float(p.max()),
                  cv_log_q90=conformal_width(np.abs(np.log(loo[kind] / y)), WIDTH_COVERAGE), threads=threads)
    if kind == "kinds":
        assert s is not None and theta is not None
        r = fit_ratios(p, y, s, ridge)
        return Correction(a=0.0, b=1.0, ratios=dict(zip(KINDS, map(float, r))),
                          theta_ms=dict(zip(KINDS, map(float, theta))), **common)  # type: ignore[arg-type]
    a, b = _fit(kind, lp, ly)
    return Correction(a=a, b=b, **common)  # type: ignore[arg-type]


def conformal_width(abs_log_errors: np.ndarray, coverage: float) -> float:
    """The split-conformal ``coverage`` quantile of absolute log errors: the
    ``ceil((n + 1) * coverage)``-th smallest (the largest when that exceeds n)."""
    r = np.sort(np.asarray(abs_log_errors, dtype=np.float64))
    return float(r[min(len(r), int(np.ceil((len(r) + 1) * coverage))) - 1])
