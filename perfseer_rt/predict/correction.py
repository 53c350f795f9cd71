"""A calibrated device's correction of its base predictor (the manifest's contract).

A calibrated entry's ``manifest.json`` has ``calibration.corrections``: one
:class:`Correction` per metric, written by :mod:`perfseer_rt.calibrate` and
applied by :mod:`perfseer_rt.predict.api` to the base predictor's output as
reported (peak memory after its phases are combined).

A ``"power"`` correction's slope is fitted on the calibration's reference
models only, which span a narrow range (about 0.5-50 ms on a CPU); outside
the range of base predictions it was fitted on (``fit_min``..``fit_max``,
in the metric's unit) it is not extrapolated: the ratio it applies at the
nearer end of that range is kept (slope 1 in log space beyond it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Correction:
    """``value = exp(a) * base ** b``; ``cv_*``: leave-one-out error of this fit's recipe (%)."""

    metric: str
    kind: str
    a: float
    b: float
    count: int
    cv_mape: float
    cv_within_10: float
    base_mape: float  # the uncorrected base predictor's MAPE on the same models (%)
    #: range of the base predictions the fit saw (metric's unit); None in entries
    #: written before the range was kept (then the fit applies everywhere)
    fit_min: float | None = None
    fit_max: float | None = None
    #: the leave-one-out error as a width: the split-conformal 90 % quantile of
    #: ``|log(LOO prediction / measured)|`` (natural log, unitless) over the
    #: reference models; the entry widens the base's intervals by it
    #: (:func:`perfseer_rt.predict.uncertainty.widened`). None in entries written before
    cv_log_q90: float | None = None

    def apply(self, value: np.ndarray | float) -> np.ndarray:
        """The corrected value(s): ``exp(a) * v ** b`` inside the fitted range,
        the ratio at the nearer end of it outside."""
        v = np.maximum(np.asarray(value, dtype=np.float64), 1e-12)
        inside = np.clip(v, self.fit_min or 0.0, self.fit_max or np.inf)  # >= v's floor, so > 0
        return np.asarray(np.exp(self.a) * np.power(inside, self.b) * (v / inside))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Correction":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
