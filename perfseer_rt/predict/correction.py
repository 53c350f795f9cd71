"""A calibrated device's correction of its base predictor (the manifest's contract).

A calibrated entry's ``manifest.json`` has ``calibration.corrections``: one
:class:`Correction` per metric, written by :mod:`perfseer_rt.calibrate` and
applied by :func:`perfseer_rt.predict.seernet_run.reported` to the base predictor's output as
reported (peak memory after its phases are combined).

A ``"kinds"`` correction (latency) multiplies the base prediction by
``sum_k ratio_k * share_k``: a ratio of this machine to the base device per
kind of work, weighted by the share of the base device's time each kind
takes in the graph (:mod:`perfseer_rt.calibrate.kinds`; ``theta_ms`` holds
the base's per-kind costs the shares come from, so an entry keeps working
when the package's costs are refitted). It needs the graphs.

A ``"power"`` correction's slope is fitted on the calibration's reference
models only, which span a narrow range (about 0.5-50 ms on a CPU); outside
the range of base predictions it was fitted on (``fit_min``..``fit_max``,
in the metric's unit) it is not extrapolated: the ratio it applies at the
nearer end of that range is kept (slope 1 in log space beyond it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from perfseer_rt.calibrate import kinds
from perfseer_rt.errors import PerfSeerError


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
    #: ``"kinds"`` only: this machine over the base device per kind of work
    #: (:data:`perfseer_rt.calibrate.kinds.KINDS`), and the base's cost per unit (ms)
    ratios: dict[str, float] | None = None
    theta_ms: dict[str, float] | None = None
    #: intra-op threads the measurements behind the correction ran with
    threads: int | None = None

    def factor(self, graphs: Sequence[Any]) -> np.ndarray:
        """``"kinds"``: the factor per graph, ``sum_k ratio_k * share_k``."""
        if self.ratios is None or self.theta_ms is None:
            raise PerfSeerError(f"{self.metric}: a 'kinds' correction without ratios; calibrate again")
        theta = np.array([self.theta_ms[k] for k in kinds.KINDS])
        works = np.stack([kinds.graph_work(g) for g in graphs]) if len(graphs) else np.zeros((0, len(kinds.KINDS)))
        return kinds.mixture(self.ratios, kinds.shares(works, theta))

    def apply(self, value: np.ndarray | float, graphs: Sequence[Any] | None = None) -> np.ndarray:
        """The corrected value(s): ``"kinds"``: times :meth:`factor` of
        ``graphs`` (one per value); else ``exp(a) * v ** b`` inside the
        fitted range, the ratio at the nearer end of it outside.

        Raises:
            PerfSeerError: a ``"kinds"`` correction without the graphs.
        """
        v = np.maximum(np.asarray(value, dtype=np.float64), 1e-12)
        if self.kind == "kinds":
            if graphs is None:
                raise PerfSeerError(f"{self.metric}: the per-kind correction needs the graphs")
            return np.asarray(v * self.factor(graphs))
        inside = np.clip(v, self.fit_min or 0.0, self.fit_max or np.inf)  # >= v's floor, so > 0
        return np.asarray(np.exp(self.a) * np.power(inside, self.b) * (v / inside))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Correction":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
