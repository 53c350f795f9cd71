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
from typing import Any

import numpy as np

from perfseer_rt import extract
from perfseer_rt.gpu import backward as B
from perfseer_rt.gpu import learned_features as LF
from perfseer_rt.gpu import step
from perfseer_rt.gpu.kernel_table import KernelTable
from perfseer_rt.gpu.precision import get_precision
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


@dataclass
class LabelData:
    x: np.ndarray        #: float32 [K, F]
    roof: np.ndarray     #: float64 [K] ms
    count: np.ndarray    #: float64 [K]
    launches: float
    host_ms: float


@lru_cache(maxsize=4)
def _graph(onnx: str, batch: int, dims: tuple[tuple[str, int], ...]) -> Any:
    return extract(onnx, batch=batch, dims=dict(dims) or None)


@lru_cache(maxsize=16)
def _table(onnx: str, batch: int, dims: tuple[tuple[str, int], ...], precision: str, mode: str,
           optimizer: str | None, sdpa: bool) -> KernelTable:
    cfg = step.StepConfig(get_precision(precision), mode=mode,
                          optimizer=B.get_optimizer(optimizer) if mode == "train" else None, sdpa=sdpa)
    return step.kernels(_graph(onnx, batch, dims), cfg)


def label_data(label: Label, spec: GpuSpec) -> LabelData:
    """The kernel data of ``label`` on ``spec`` (module doc)."""
    table = _table(label.onnx, label.batch, label.dims, label.precision, label.mode, label.optimizer,
                   label.sdpa)
    prec = get_precision(label.precision)
    x = LF.features(table, spec, label.layout, prec.half)
    t_c, t_m = LF.roofline_ms(table, spec)
    roof = np.maximum(np.maximum(t_c, t_m), 1e-6)
    key = np.concatenate([x.astype(np.float64), roof[:, None]], axis=1)
    uniq, inverse = np.unique(key, axis=0, return_inverse=True)
    count = np.bincount(inverse.ravel(), minlength=len(uniq)).astype(np.float64)
    return LabelData(uniq[:, :-1].astype(np.float32), uniq[:, -1], count, table.launches,
                     float(step.host_ms(table, label.mode).sum()))
