"""A calibrated device's correction of its base predictor (the manifest's contract).

A calibrated entry's ``manifest.json`` has ``calibration.corrections``: one
:class:`Correction` per metric, written by :mod:`perfseer_rt.calibrate` and
applied by :mod:`perfseer_rt.predict.api` to the base predictor's output.
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

    def apply(self, value: np.ndarray | float) -> np.ndarray:
        return np.asarray(np.exp(self.a) * np.power(np.maximum(value, 1e-12), self.b))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Correction":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})
