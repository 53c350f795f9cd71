"""How far a graph lies from a predictor's training data, and the interval
that goes with it.

Both are calibrated at training time (``training/seernet/uncertainty.py``)
and shipped in the manifest's ``seernet.uncertainty`` section:

* **Distance score.** A graph is described by its global features
  (``slog1p``, then standardised with the training set's mean and std) and
  its operator mix (the share of its nodes of each operator type, scaled by
  :data:`OP_MIX_SCALE`). Its score is the mean Euclidean distance to its
  ``k`` nearest training graphs divided by ``sqrt(features)``: 0 for a graph
  the predictor was trained on, about 1 for a typical new architecture of a
  known family. The out-of-distribution warning fires above the manifest's
  threshold, which was chosen on held-out families where the predictor's
  errors were known.
* **Disagreement.** The shipped blend holds two models (SeerNet and trees
  on the global features); its second output is their gap per metric,
  ``log(SeerNet) - log(trees)``. Where they disagree, the blend errs more
  (the d3c7c56 predictor on the real-model checks 10-14: the third of rows
  with the largest memory gap had 2.5x the memory MAPE of the rest), so a metric whose gap
  is beyond its calibrated threshold gets a warning, and a metric whose
  intervals are ``scale: "disagreement"`` gets bounds proportional to
  ``floor + |gap|`` (normalised split conformal; ``floor`` per metric).
* **Intervals.** Split conformal on ``log(measured / predicted)``, one pair of
  quantiles per metric and per bin of score (in distribution / beyond the
  threshold) and batch size (:data:`BATCH_GROUPS`), so a graph far from the
  training data, or run at a large batch, gets the wider interval that such
  graphs needed on held-out data; with ``scale: "disagreement"`` the
  quantiles are those of ``log(measured / predicted) / (floor + |gap|)``.
  ``coverage`` is the share of measurements the interval is meant to hold
  (e.g. 0.9).
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.graph import layout
from perfseer_rt.predict.manifest import MemoryParts, MetricInterval, Uncertainty

#: Upper batch sizes of the interval bins within a score bin (None: any):
#: memory errors grow with the batch (activations), so batch 1, 2-8 and
#: larger batches are calibrated apart.
BATCH_GROUPS: tuple[int | None, ...] = (1, 8, None)
#: How the two warnings of a prediction begin (tools that read predictions match on them).
DISTANCE_WARNING = "far from the training data"
DISAGREEMENT_WARNING = "the two models of the predictor disagree"
#: Weight of the operator-mix features against the standardised globals: a
#: graph made only of operators the training set never used sits ~3 apart.
OP_MIX_SCALE = 3.0
#: Columns of the node features that one-hot the operator type.
OP_COLUMNS = tuple(i for i, c in enumerate(layout.NODE_COLUMNS) if c.startswith("op_"))
#: Names of :func:`features` columns, in order.
#: The globals are those of layout ``psrt-1`` in every layout (a distance
#: reference keeps working when globals are added).
FEATURE_NAMES = tuple(layout.BASE_GLOBAL_COLUMNS) + tuple(layout.NODE_COLUMNS[i] for i in OP_COLUMNS)


def features(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Raw distance features of one graph: ``slog1p`` of its globals ``u`` and
    its operator mix (share of nodes per operator type, from node features
    ``x``). Returns ``float64[len(FEATURE_NAMES)]``."""
    u = np.asarray(u, dtype=np.float64).reshape(-1)[:len(layout.BASE_GLOBAL_COLUMNS)]
    x = np.asarray(x, dtype=np.float64)
    mix = x[:, OP_COLUMNS].mean(axis=0) if len(x) else np.zeros(len(OP_COLUMNS))
    out: np.ndarray = np.concatenate([np.sign(u) * np.log1p(np.abs(u)), mix])
    return out


def standardize(raw: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Rows of :func:`features` in score space."""
    out: np.ndarray = (np.asarray(raw, dtype=np.float64) - mean) / std
    return out


def fit_standardization(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std of the training rows: globals standardised, the operator
    mix left as shares times :data:`OP_MIX_SCALE`."""
    raw = np.asarray(raw, dtype=np.float64)
    n_glob = len(layout.BASE_GLOBAL_COLUMNS)
    mean = np.zeros(raw.shape[1])
    std = np.full(raw.shape[1], 1.0 / OP_MIX_SCALE)
    mean[:n_glob] = raw[:, :n_glob].mean(axis=0)
    std[:n_glob] = np.maximum(raw[:, :n_glob].std(axis=0), 1e-3)
    return mean, std


def distance_scores(points: np.ndarray, reference: np.ndarray, k: int) -> np.ndarray:
    """Mean distance of each row of ``points`` to its ``k`` nearest rows of
    ``reference`` (both in score space), over ``sqrt(columns)``."""
    points = np.atleast_2d(np.asarray(points, dtype=np.float64))
    reference = np.asarray(reference, dtype=np.float64)
    k = max(1, min(k, len(reference)))
    out = np.empty(len(points))
    for start in range(0, len(points), 256):  # bounded memory: 256 x N distances at a time
        p = points[start:start + 256]
        d2 = (p * p).sum(1)[:, None] - 2 * p @ reference.T + (reference * reference).sum(1)[None, :]
        d = np.sqrt(np.maximum(d2, 0.0))
        out[start:start + 256] = np.sort(np.partition(d, k - 1, axis=1)[:, :k], axis=1).mean(1)
    scaled: np.ndarray = out / np.sqrt(points.shape[1])
    return scaled


@dataclass(frozen=True)
class Interval:
    """``[value * exp(lo), value * exp(hi)]`` holds ``coverage`` of measurements."""

    lo: float
    hi: float
    coverage: float

    def around(self, value: float) -> list[float]:
        return [float(value * np.exp(self.lo)), float(value * np.exp(self.hi))]


def widened(iv: Interval, width: float) -> Interval:
    """``iv`` with each side widened in quadrature by ``width`` (log space):
    a calibrated entry's own leave-one-out error (:attr:`Correction.cv_log_q90
    <perfseer_rt.predict.correction.Correction.cv_log_q90>`) on top of the
    base's model error, taken as independent. A side that does not reach
    the prediction counts as 0."""
    return Interval(-float(np.hypot(min(iv.lo, 0.0), width)), float(np.hypot(max(iv.hi, 0.0), width)),
                    iv.coverage)


def conformal_quantiles(log_ratios: np.ndarray, coverage: float) -> tuple[float, float]:
    """Lower and upper quantiles of ``log(measured / predicted)`` that hold
    ``coverage`` of a new exchangeable sample (split conformal: the
    ``ceil((n + 1)(1 - a/2)) / n`` order statistic on each side)."""
    r = np.sort(np.asarray(log_ratios, dtype=np.float64))
    n = len(r)
    if n == 0:
        raise ValueError("conformal_quantiles: no calibration residuals")
    tail = (1.0 - coverage) / 2.0
    hi_rank = min(n, int(np.ceil((n + 1) * (1.0 - tail))))
    lo_rank = max(1, int(np.floor((n + 1) * tail)))
    return float(r[lo_rank - 1]), float(r[hi_rank - 1])


# ------------------------------------------------------------ at prediction
@lru_cache(maxsize=8)
def _reference(path: str, sha256: str) -> np.ndarray:
    """The training graphs' features in score space, checked against the manifest."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise PerfSeerError(f"{path}: cannot read the predictor's reference features ({exc})") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise PerfSeerError(f"{path}: checksum differs from the manifest's; reinstall the predictor")
    ref: np.ndarray = np.load(io.BytesIO(data), allow_pickle=False).astype(np.float64)
    return ref


def scores(unc: Uncertainty, folder: Path, graphs: Sequence[Any]) -> np.ndarray:
    """Distance score of each PerfGraph (anything with ``x`` and ``u``) to the
    predictor's training graphs."""
    if tuple(unc.features) != FEATURE_NAMES:
        raise PerfSeerError("the predictor's distance features differ from this perfseer-rt's "
                            f"({len(unc.features)} vs {len(FEATURE_NAMES)}); update one of them")
    ref = _reference(str(Path(folder) / unc.reference_file), unc.reference_sha256)
    raw = np.stack([features(g.x, g.u) for g in graphs])
    return distance_scores(standardize(raw, np.array(unc.mean), np.array(unc.std)), ref, unc.k)


def interval(unc: Uncertainty, metric: str, score: float, batch: int,
             gap: float | None = None) -> Interval | None:
    """The calibrated interval of ``metric`` for a graph of this ``score``,
    batch size and, for a disagreement-scaled metric, ``gap`` (None: no
    interval for such a metric)."""
    iv = unc.intervals.get(metric)
    return None if iv is None else metric_interval(iv, score, batch, gap)


def metric_interval(iv: MetricInterval, score: float, batch: int, gap: float | None = None) -> Interval | None:
    """The interval of ``iv`` for a graph of this ``score``, batch size and
    ``gap`` (needed where ``iv.scale`` is ``"disagreement"``, else None)."""
    if iv.scale == "none":
        return bin_interval(iv, score, batch)
    if gap is None or iv.floor is None or not np.isfinite(gap):
        return None
    return bin_interval(iv, score, batch, iv.floor + abs(gap))


def phase_gaps(gap: np.ndarray, values: np.ndarray, metrics: Sequence[str],
               memory: MemoryParts | None) -> np.ndarray:
    """Gaps ``[G, M]`` as the metrics are reported: where the peak memory is
    the larger of two phases (``memory.combine`` ``"max"``), the peak's gap
    is that of the larger phase in ``values`` (``[G, M]``, same order)."""
    out = np.array(gap, dtype=np.float64, copy=True)
    if memory is None or memory.combine != "max" or \
            not {memory.peak, memory.load, memory.run} <= set(metrics):
        return out
    i, a, b = (list(metrics).index(n) for n in (memory.peak, memory.load, memory.run))
    values = np.asarray(values, dtype=np.float64)
    out[:, i] = np.where(values[:, a] >= values[:, b], out[:, a], out[:, b])
    return out


def takes(max_score: float | None, max_batch: int | None, score: float, batch: int) -> bool:
    """Whether a bin bounded so takes a graph of this score and batch size."""
    return (max_score is None or score <= max_score) and (max_batch is None or batch <= max_batch)


def bin_interval(iv: MetricInterval, score: float, batch: int, unit: float = 1.0) -> Interval | None:
    """The interval of the first bin of ``iv`` that takes this ``score`` and
    ``batch``, its bounds times ``unit`` (``floor + |gap|`` for a
    disagreement-scaled metric)."""
    for b in iv.bins:
        if takes(b.max_score, b.max_batch, score, batch):
            return Interval(b.lo * unit, b.hi * unit, iv.coverage)
    return None
