"""Global-features gradient-boosting baseline."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor


class GlobalGBM:
    """Gradient-boosted trees on the global features only: FLOPs, MAC,
    weight and parameter statistics, node/edge counts, arithmetic intensity
    and batch size (all of :data:`perfseer_rt.graph.layout.GLOBAL_COLUMNS`,
    after the common normalization) -> standardized log metric. The classic
    "FLOPs + params + batch" predictor, as in the MLP regressors that DIPPM
    cites (Bouhali et al., Lu et al.), with trees instead of an MLP.

    One scikit-learn ``HistGradientBoostingRegressor`` per metric; early
    stopping on the validation split when given.

    Shapes:
        ``fit(u [S, Fg], t [S, M])``, ``predict(u [S, Fg]) -> [S, M]``; NaN
        targets are skipped per metric.
    """

    def __init__(self, max_iter: int = 2000, learning_rate: float = 0.05, max_leaf_nodes: int = 31,
                 min_samples_leaf: int = 5, seed: int = 0):
        self.params = dict(max_iter=max_iter, learning_rate=learning_rate, max_leaf_nodes=max_leaf_nodes,
                           min_samples_leaf=min_samples_leaf, random_state=seed)
        self.models: list[HistGradientBoostingRegressor] = []

    def fit(self, u: np.ndarray, t: np.ndarray, u_val: np.ndarray | None = None,
            t_val: np.ndarray | None = None) -> "GlobalGBM":
        self.models = []
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
        return np.stack([m.predict(u) for m in self.models], axis=1)

    def num_parameters(self) -> int:
        """Tree nodes over all trees (a size comparable across runs)."""
        return int(sum(sum(p.nodes.shape[0] for ps in m._predictors for p in ps) for m in self.models))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.params})"


__all__: Sequence[str] = ["GlobalGBM"]
