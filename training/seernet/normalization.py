"""Feature and target normalization, fitted on the training split only.

Features: every column named in :data:`perfseer_rt.graph.layout.LOG_SCALED`
first goes through a signed log, ``slog1p(x) = sign(x) * log1p(|x|)`` (equal
to ``log1p`` for the non-negative values the extractor produces, and defined
for every real), then every column is standardized::

    x' = (f(x) - mean) / std,     f = slog1p on log columns, identity elsewhere

``mean``/``std`` are taken over all nodes (edges, graphs) of the training
graphs. A column that is constant in training gets ``std = 1``; any other
``std`` is floored at ``std_floor`` so that an unseen value cannot explode.

Targets: ``t' = (log(y) - mean) / std`` per metric; predictions are decoded
with ``y = exp(t' * std + mean)``. The exported ONNX carries both transforms
(:mod:`training.seernet.export`), so its inputs are raw PerfGraph arrays and
its outputs are in the metrics' units. :meth:`Normalization.to_dict` is what
goes into the manifest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from perfseer_rt.graph import layout

TRANSFORM_DOC = ("x' = (f(x) - mean) / std with f(x) = sign(x)*log1p(|x|) on columns where "
                 "log1p is true, f(x) = x elsewhere; targets: y = exp(t * std + mean)")


def slog1p(x: np.ndarray) -> np.ndarray:
    """``sign(x) * log1p(|x|)``: ``log1p`` that is defined for negative values."""
    return np.sign(x) * np.log1p(np.abs(x))


@dataclass
class ColumnStats:
    """Per-column transform of one feature block (node, edge or global)."""

    columns: tuple[str, ...]
    log1p: np.ndarray  # bool[F]
    mean: np.ndarray   # float64[F]
    std: np.ndarray    # float64[F]

    @classmethod
    def fit(cls, columns: Sequence[str], rows: np.ndarray, std_floor: float) -> "ColumnStats":
        columns = tuple(columns)
        log = np.array([c in layout.LOG_SCALED for c in columns], dtype=bool)
        rows = np.asarray(rows, dtype=np.float64).reshape(-1, len(columns))
        if len(rows) == 0:
            return cls(columns, log, np.zeros(len(columns)), np.ones(len(columns)))
        f = np.where(log, slog1p(rows), rows)
        mean, std = f.mean(axis=0), f.std(axis=0)
        std = np.where(std < 1e-12, 1.0, np.maximum(std, std_floor))
        return cls(columns, log, mean, std)

    def transform(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.float64)
        f = np.where(self.log1p, slog1p(rows), rows)
        return ((f - self.mean) / self.std).astype(np.float32)

    def to_dict(self) -> dict:
        return {"columns": list(self.columns), "log1p": [bool(b) for b in self.log1p],
                "mean": [float(v) for v in self.mean], "std": [float(v) for v in self.std]}

    @classmethod
    def from_dict(cls, d: dict) -> "ColumnStats":
        return cls(tuple(d["columns"]), np.array(d["log1p"], dtype=bool),
                   np.array(d["mean"], dtype=np.float64), np.array(d["std"], dtype=np.float64))


@dataclass
class Normalization:
    """Feature and target transforms (see module doc); JSON round-trips.

    Attributes:
        node, edge, glob: :class:`ColumnStats` for ``x``, ``edge_attr``, ``u``.
        target_mean, target_std: metric name -> stats of ``log(y)``.
        feature_version: the PerfGraph layout the stats were fitted on.
    """

    node: ColumnStats
    edge: ColumnStats
    glob: ColumnStats
    target_mean: dict[str, float]
    target_std: dict[str, float]
    feature_version: str = layout.FEATURE_VERSION

    @classmethod
    def fit(cls, samples: Sequence, metrics: Iterable[str], std_floor: float = 1e-3) -> "Normalization":
        """Fit on ``samples`` (the training split only) for ``metrics``."""
        if not samples:
            raise ValueError("Normalization.fit: no training samples")
        node = ColumnStats.fit(layout.NODE_COLUMNS, np.concatenate([s.x for s in samples]), std_floor)
        edge = ColumnStats.fit(layout.EDGE_COLUMNS,
                               np.concatenate([s.edge_attr for s in samples]), std_floor)
        glob = ColumnStats.fit(layout.GLOBAL_COLUMNS, np.stack([s.u for s in samples]), std_floor)
        mean, std = {}, {}
        for m in metrics:
            vals = np.array([s.targets[m] for s in samples if _valid(s.targets.get(m))])
            if len(vals) == 0:
                raise ValueError(f"Normalization.fit: no training sample has metric {m!r}")
            logs = np.log(vals)
            mean[m] = float(logs.mean())
            s_ = float(logs.std())
            std[m] = s_ if s_ > 1e-6 else 1.0
        return cls(node, edge, glob, mean, std)

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(self.target_mean)

    # ------------------------------------------------------------ features
    def apply(self, sample):
        """A copy of a :class:`~training.seernet.sample.GraphSample` with
        normalized float32 feature arrays (targets are left in their units)."""
        return sample.with_arrays(self.node.transform(sample.x),
                                  self.edge.transform(sample.edge_attr).reshape(-1, len(self.edge.columns)),
                                  self.glob.transform(sample.u))

    # ------------------------------------------------------------- targets
    def encode_targets(self, y: np.ndarray, metrics: Sequence[str]) -> np.ndarray:
        """Metric units ``[G, M]`` -> standardized log space (NaN stays NaN)."""
        mean, std = self._target_stats(metrics)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (np.log(np.asarray(y, dtype=np.float64)) - mean) / std

    def decode_targets(self, t: np.ndarray, metrics: Sequence[str]) -> np.ndarray:
        """Standardized log space ``[G, M]`` -> metric units."""
        mean, std = self._target_stats(metrics)
        return np.exp(np.asarray(t, dtype=np.float64) * std + mean)

    def _target_stats(self, metrics: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        missing = [m for m in metrics if m not in self.target_mean]
        if missing:
            raise KeyError(f"normalization has no stats for {missing}; it knows {list(self.metrics)}")
        return (np.array([self.target_mean[m] for m in metrics]),
                np.array([self.target_std[m] for m in metrics]))

    # ---------------------------------------------------------- serialization
    def to_dict(self) -> dict:
        return {
            "feature_version": self.feature_version,
            "transform": TRANSFORM_DOC,
            "node": self.node.to_dict(), "edge": self.edge.to_dict(), "global": self.glob.to_dict(),
            "targets": {m: {"transform": "log", "mean": self.target_mean[m], "std": self.target_std[m]}
                        for m in self.metrics},
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Normalization":
        return cls(ColumnStats.from_dict(d["node"]), ColumnStats.from_dict(d["edge"]),
                   ColumnStats.from_dict(d["global"]),
                   {m: float(t["mean"]) for m, t in d["targets"].items()},
                   {m: float(t["std"]) for m, t in d["targets"].items()},
                   d.get("feature_version", layout.FEATURE_VERSION))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Normalization":
        return cls.from_dict(json.loads(text))


def _valid(v) -> bool:
    return v is not None and np.isfinite(v) and v > 0
