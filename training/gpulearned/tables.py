"""Per-label kernel data for the learned layer: each whole-model label
(a model at a batch on a GPU at a precision, layout and mode) becomes the
features, roofline ms and counts of its distinct kernels
(:mod:`perfseer_rt.gpu.learned_features`), its launches and host ms.

Kernels with identical features within a step (the repeated blocks of a
network) are kept once with a count: the step's sum is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from perfseer_rt import extract
from perfseer_rt.gpu import backward as B
from perfseer_rt.gpu import learned_features as LF
from perfseer_rt.gpu import pricing, step
from perfseer_rt.gpu.kernel_table import KernelTable
from perfseer_rt.gpu.precision import get_precision
from perfseer_rt.gpu.predictor import PRIOR_LAUNCH_MS
from perfseer_rt.gpu.prior import Prior
from perfseer_rt.gpu.specs import GpuSpec


@dataclass(frozen=True)
class Label:
    """One whole-model measurement and how to rebuild its kernels."""

    onnx: str                 #: structure-only ONNX file of the model
    batch: int
    gpu: str                  #: GPU key (spec sheet name)
    precision: str
    layout: str               #: nchw | nhwc
    mode: str                 #: inference | train
    optimizer: str | None
    sdpa: bool                #: the framework fused attention (PyTorch >= 2.0)
    ms: float                 #: measured step time, ms
    group: str                #: architecture family (for held-out folds)
    kind: str                 #: coarse kind (cnn, vit, ...)
    source: str               #: who measured it (provenance key)
    dims: tuple[tuple[str, int], ...] = ()


def label_id(label: Label) -> str:
    """A label's stable name (the same on another machine and cache folder):
    who measured what model, batch, GPU, precision, layout, mode and update."""
    dims = ",".join(f"{k}={v}" for k, v in label.dims)
    return (f"{label.source}|{Path(label.onnx).name}|{label.batch}|{label.gpu}|{label.precision}|"
            f"{label.layout}|{label.mode}|{label.optimizer}|{int(label.sdpa)}|{dims}")


@dataclass
class LabelData:
    x: np.ndarray        #: float32 [K, F]
    roof: np.ndarray     #: float64 [K] ms
    count: np.ndarray    #: float64 [K]
    launches: float
    host_ms: float
    prior_ms: float = float("nan")  #: the step priced by the NeuSight kernel prior (the baseline)


@lru_cache(maxsize=4)
def _graph(onnx: str, batch: int, dims: tuple[tuple[str, int], ...]) -> Any:
    return extract(onnx, batch=batch, dims=dict(dims) or None)


@lru_cache(maxsize=16)
def _table(onnx: str, batch: int, dims: tuple[tuple[str, int], ...], precision: str, mode: str,
           optimizer: str | None, sdpa: bool, layout: str = "nchw", transposes: bool = False) -> KernelTable:
    cfg = step.StepConfig(get_precision(precision), mode=mode,
                          optimizer=B.get_optimizer(optimizer) if optimizer else None, sdpa=sdpa,
                          update=optimizer is not None, layout=layout, nchw_transposes=transposes)
    return step.kernels(_graph(onnx, batch, dims), cfg)


def label_data(label: Label, spec: GpuSpec, prior: Prior | None = None,
               transposes: bool = False) -> LabelData:
    """The kernel data of ``label`` on ``spec`` (module doc); with ``prior``,
    the step as the kernel prior prices it too; ``transposes``: with the
    NCHW layout transposes of :func:`perfseer_rt.gpu.step.layout_transposes`."""
    table = _table(label.onnx, label.batch, label.dims, label.precision, label.mode, label.optimizer,
                   label.sdpa, label.layout if transposes else "nchw", transposes)
    prec = get_precision(label.precision)
    x = LF.features(table, spec, label.layout, prec.half)
    t_c, t_m = LF.roofline_ms(table, spec)
    roof = np.maximum(np.maximum(t_c, t_m), 1e-6)
    key = np.concatenate([x.astype(np.float64), roof[:, None]], axis=1)
    uniq, inverse = np.unique(key, axis=0, return_inverse=True)
    count = np.bincount(inverse.ravel(), minlength=len(uniq)).astype(np.float64)
    host = float(step.host_ms(table, label.mode).sum())
    prior_ms = float("nan")
    if prior is not None:
        gpu = float(pricing.price(table, spec, prior, PRIOR_LAUNCH_MS).sum())
        prior_ms = step.total_ms(gpu, host)
    return LabelData(uniq[:, :-1].astype(np.float32), uniq[:, -1], count, table.launches, host, prior_ms)


def extrapolate(one: LabelData, two: LabelData, layers: int) -> LabelData:
    """The data of an ``layers``-layer model from its 1- and 2-layer
    exports: every kernel row's count (and the launches, host and prior ms)
    is ``c1 + (layers - 1) (c2 - c1)`` - the layers are identical, so the
    second layer's kernels are the difference."""
    rows: dict[bytes, list] = {}
    for d, sign in ((one, -(layers - 2)), (two, layers - 1)):
        for x, r, c in zip(d.x, d.roof, d.count):
            key = x.tobytes() + np.float64(r).tobytes()
            rows.setdefault(key, [x, r, 0.0])[2] += sign * c
    kept = [v for v in rows.values() if v[2] > 1e-9]
    def lin(a: float, b: float) -> float:
        return a + (layers - 1) * (b - a)
    return LabelData(np.stack([v[0] for v in kept]), np.array([v[1] for v in kept]),
                     np.array([v[2] for v in kept]), lin(one.launches, two.launches),
                     lin(one.host_ms, two.host_ms), lin(one.prior_ms, two.prior_ms))
