"""Global-features gradient-boosting baseline."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor

from perfseer_rt.graph import layout

#: Metrics the trees learn relative to a scale of the model (:class:`GlobalGBM`):
#: metric -> (global columns summed, floor added before the log). Times and
#: energy per FLOP; memory (MiB) per byte of weights, plus the activation
#: bytes alive at once where the run phase counts (bytes, floor 1 MiB).
SCALES: dict[str, tuple[tuple[str, ...], float]] = {
    "latency_ms": (("flops_total",), 1e6), "step_ms": (("flops_total",), 1e6),
    "energy_mj": (("flops_total",), 1e6),
    "load_peak_mb": (("weight_total",), 2.0 ** 20),
    "run_peak_mb": (("weight_total", "act_live_peak"), 2.0 ** 20),
    "peak_mem_mb": (("weight_total", "act_live_peak"), 2.0 ** 20),
}
#: Position of ``flops_total`` in the global features.
FLOPS_COLUMN = layout.GLOBAL_COLUMNS.index("flops_total")
#: Added to ``flops_total`` before the log (FLOPs): graphs that compute
#: nothing (all data movement) keep a finite offset.
FLOPS_FLOOR = SCALES["latency_ms"][1]


def scale_of(metric: str) -> tuple[list[int], float]:
    """``(column indices in layout.GLOBAL_COLUMNS, floor)`` of ``metric``'s
    scale; metrics without one (:data:`SCALES`) get ``flops_total`` (their
    offset weight is 0)."""
    cols, floor = SCALES.get(metric, (("flops_total",), FLOPS_FLOOR))
    return [layout.GLOBAL_COLUMNS.index(c) for c in cols], floor


class GlobalGBM:
    """Gradient-boosted trees on the global features only: FLOPs, MAC,
    weight and parameter statistics, node/edge counts, arithmetic intensity
    and batch size (all of :data:`perfseer_rt.graph.layout.GLOBAL_COLUMNS`,
    after the common normalization) -> standardized log metric. The classic
    "FLOPs + params + batch" predictor, as in the MLP regressors that DIPPM
    cites (Bouhali et al., Lu et al.), with trees instead of an MLP.

    One scikit-learn ``HistGradientBoostingRegressor`` per metric; early
    stopping on the validation split when given.

    Time, energy and memory grow with the model far beyond the largest one
    measured, and trees cannot extrapolate: the trees learn each metric
    relative to a scale of the model instead (:data:`SCALES`: time per FLOP,
    memory per byte of weights and live activations), ``pred = trees(u) +
    offset_scale[m] * log(sum of the scale's columns + floor)``
    (:meth:`offset`; ``offset_scale`` is ``1 / std`` of the metric's
    standardized log target, 0 for a metric learned as is). Per FLOP took the
    GBM's latency MAPE on the real-model held-out split from 11.9 to 9.9 %
    and on 21 user-style checks of published models from 13.7 to 7.8 %
    (``reports/cpu-amd-epyc-1t``).

    Shapes:
        ``fit(u [S, Fg], t [S, M])``, ``predict(u [S, Fg]) -> [S, M]``; NaN
        targets are skipped per metric.
    """

    def __init__(self, max_iter: int = 2000, learning_rate: float = 0.05, max_leaf_nodes: int = 31,
                 min_samples_leaf: int = 5, seed: int = 0, offset_scale: Sequence[float] | None = None,
                 metrics: Sequence[str] | None = None):
        self.params = dict(max_iter=max_iter, learning_rate=learning_rate, max_leaf_nodes=max_leaf_nodes,
                           min_samples_leaf=min_samples_leaf, random_state=seed)
        self.offset_scale = None if offset_scale is None else [float(v) for v in offset_scale]
        #: each metric's scale (:func:`scale_of`); None: per FLOP for every metric
        self.scales = None if metrics is None else [scale_of(m) for m in metrics]
        self.models: list[HistGradientBoostingRegressor] = []

    def scale_matrix(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(columns [K], selection [K, n], floors [n])``: the scale of metric
        ``j`` is ``u[:, columns] @ selection[:, j] + floors[j]`` (the form the
        exported ONNX computes, :func:`training.seernet.ensemble.export_blend`)."""
        scales = self.scales or [([FLOPS_COLUMN], FLOPS_FLOOR)] * n
        cols = sorted({c for cs, _ in scales for c in cs})
        sel = np.zeros((len(cols), n))
        for j, (cs, _) in enumerate(scales):
            for c in cs:
                sel[cols.index(c), j] = 1.0
        return np.asarray(cols, np.int64), sel, np.asarray([f for _, f in scales])

    def offset(self, u: np.ndarray) -> np.ndarray:
        """``[S, M]`` (or ``0``): each metric's scale offset (class doc)."""
        if self.offset_scale is None:
            return np.zeros(1)
        cols, sel, floors = self.scale_matrix(len(self.offset_scale))
        scale = np.maximum(np.asarray(u, dtype=np.float64)[:, cols], 0.0) @ sel + floors[None, :]
        return np.asarray(self.offset_scale)[None, :] * np.log(scale)

    def fit(self, u: np.ndarray, t: np.ndarray, u_val: np.ndarray | None = None,
            t_val: np.ndarray | None = None) -> "GlobalGBM":
        self.models = []
        if self.offset_scale is not None and len(self.offset_scale) != t.shape[1]:
            raise ValueError(f"offset_scale has {len(self.offset_scale)} values for {t.shape[1]} metrics")
        t = t - self.offset(u)
        if u_val is not None and t_val is not None:
            t_val = t_val - self.offset(u_val)
        for m in range(t.shape[1]):
            ok = np.isfinite(t[:, m])
            model = HistGradientBoostingRegressor(**self.params, n_iter_no_change=50)
            kw = {}
            if u_val is not None and t_val is not None and np.isfinite(t_val[:, m]).sum() >= 2:
                ok_val = np.isfinite(t_val[:, m])
                model.set_params(early_stopping=True)
                kw = dict(X_val=u_val[ok_val], y_val=t_val[ok_val, m])
            else:
                model.set_params(early_stopping=len(ok) > 50)
            self.models.append(model.fit(u[ok], t[ok, m], **kw))
        return self

    def predict(self, u: np.ndarray) -> np.ndarray:
        return np.stack([m.predict(u) for m in self.models], axis=1) + self.offset(u)

    def num_parameters(self) -> int:
        """Tree nodes over all trees (a size comparable across runs)."""
        return int(sum(sum(p.nodes.shape[0] for ps in m._predictors for p in ps) for m in self.models))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.params})"


__all__: Sequence[str] = ["FLOPS_COLUMN", "FLOPS_FLOOR", "GlobalGBM", "SCALES", "scale_of"]
