"""Accuracy measures, in the metrics' own units (paper 001, section 4.1)."""

from __future__ import annotations

import numpy as np

#: Unit of a metric, read from its name's suffix (units live in names).
UNITS = {"ms": "ms", "s": "s", "us": "us", "mb": "MB", "gb": "GB", "kb": "KB", "mj": "mJ",
         "j": "J", "w": "W", "pct": "%", "percent": "%"}


def metric_unit(name: str) -> str:
    """``"latency_ms" -> "ms"``, ``"peak_mem_mb" -> "MB"``, ``"sm_util_pct" -> "%"``."""
    suffix = name.rsplit("_", 1)[-1].lower()
    if suffix not in UNITS:
        raise ValueError(f"metric {name!r} has no unit suffix; end its name with one of "
                         f"{sorted('_' + s for s in UNITS)}")
    return UNITS[suffix]


def ape(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Absolute percentage errors ``100 |pred - true| / true``."""
    return 100.0 * np.abs(np.asarray(pred, float) - np.asarray(true, float)) / np.abs(true)


def score(pred: np.ndarray, true: np.ndarray) -> dict:
    """MAPE and the share within +-10 % (both in %) over the finite pairs."""
    pred, true = np.asarray(pred, float), np.asarray(true, float)
    ok = np.isfinite(true) & np.isfinite(pred) & (true > 0)
    if not ok.any():
        return {"count": 0, "mape": None, "within_10": None}
    e = ape(pred[ok], true[ok])
    return {"count": int(ok.sum()), "mape": float(e.mean()), "within_10": float((e <= 10.0).mean() * 100),
            "median_ape": float(np.median(e))}
