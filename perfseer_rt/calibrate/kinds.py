"""Kinds of work in a graph, and how a CPU device's time splits among them.

A new CPU is not uniformly faster or slower than the one a predictor was
trained on: wide vector units speed up dense matrix products and
convolutions, hardly depthwise convolutions or memory-bound element-wise
work; more threads divide large products and add a fixed cost to every op.
Calibration therefore corrects the base prediction per kind of work
(:mod:`perfseer_rt.calibrate.fit`), weighted by the share of the base
device's time each kind takes in the graph.

Kinds (:data:`KINDS`), each with its unit of work:

* ``dense``: convolutions with one group, ``Gemm``, and matrix products with
  a weight operand (FLOPs);
* ``depthwise``: grouped and depthwise convolutions (FLOPs);
* ``attention``: matrix products of two activations (``Q K^T``, ``A V``)
  and fused attention ops (FLOPs);
* ``memory``: everything else -- element-wise, normalization, pooling,
  softmax, data movement (bytes moved: the nodes' ``mac``);
* ``nodes``: a fixed cost per op (the node count).

The share of each kind comes from a kernel-additive model of the base
device, ``time = sum_k theta_k * work_k`` (:data:`COSTS_FILE`, fitted on the
base predictor's training measurements by ``python -m training.byod.kind_costs``):
``share_k = theta_k * work_k / time``.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.graph import layout

KINDS: tuple[str, ...] = ("dense", "depthwise", "attention", "memory", "nodes")
#: Units of each kind's work.
UNITS: dict[str, str] = {"dense": "FLOPs", "depthwise": "FLOPs", "attention": "FLOPs", "memory": "bytes",
                         "nodes": "ops"}
#: The base devices' per-kind costs (ms per unit), in this package.
COSTS_FILE = "kind_costs.json"

_NODE = layout.column_index(layout.NODE_COLUMNS)
CONV_OPS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "FusedConv", "NchwcConv"})
PRODUCT_OPS = frozenset({"Gemm", "MatMul", "Einsum", "MatMulInteger", "QLinearMatMul", "FusedMatMul",
                         "FusedGemm", "MatMulNBits", "DynamicQuantizeMatMul"})
ATTENTION_OPS = frozenset({"Attention", "MultiHeadAttention", "GroupQueryAttention",
                           "PackedMultiHeadAttention", "PackedAttention"})


def work(ops: Sequence[str], x: np.ndarray) -> np.ndarray:
    """Work per kind (:data:`KINDS` order, units :data:`UNITS`) of a graph
    with these node ops and node features ``x``."""
    x = np.asarray(x, dtype=np.float64)
    arr = np.asarray(ops, dtype=object)
    flops, mac, weight = x[:, _NODE["flops"]], x[:, _NODE["mac"]], x[:, _NODE["weight"]]
    groups = x[:, _NODE["groups"]]
    conv = np.isin(arr, list(CONV_OPS))
    product = np.isin(arr, list(PRODUCT_OPS))
    depthwise = conv & (groups > 1)
    dense = (conv & ~depthwise) | (product & ((weight > 0) | (arr == "Gemm")))
    attention = (product & ~dense) | np.isin(arr, list(ATTENTION_OPS))
    memory = ~(dense | depthwise | attention)
    return np.array([flops[dense].sum(), flops[depthwise].sum(), flops[attention].sum(), mac[memory].sum(),
                     float(len(arr))])


def graph_work(graph: Any) -> np.ndarray:
    """:func:`work` of a PerfGraph."""
    return work(graph.node_ops, graph.x)


@lru_cache(maxsize=1)
def _costs_doc() -> dict[str, Any]:
    path = Path(str(resources.files("perfseer_rt.calibrate") / COSTS_FILE))
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def base_costs(base: str) -> np.ndarray:
    """``theta`` (ms per unit, :data:`KINDS` order) of a base device.

    Raises:
        PerfSeerError: no per-kind costs for this device.
    """
    entry = _costs_doc().get("devices", {}).get(base)
    if entry is None:
        raise PerfSeerError(f"no per-kind costs for base device {base!r} "
                            f"(have: {', '.join(sorted(_costs_doc().get('devices', {})))}); "
                            "fit them with python -m training.byod.kind_costs")
    return np.array([float(entry["theta_ms"][k]) for k in KINDS])


def shares(works: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Share of the base device's time per kind, rows summing to 1
    (``works``: ``[G, len(KINDS)]``)."""
    t = np.atleast_2d(np.asarray(works, dtype=np.float64)) * np.asarray(theta, dtype=np.float64)
    total = t.sum(axis=1, keepdims=True)
    out: np.ndarray = np.where(total > 0, t / np.where(total > 0, total, 1.0), 1.0 / len(KINDS))
    return out


def mixture(ratios: Mapping[str, float], share_rows: np.ndarray) -> np.ndarray:
    """Per graph ``sum_k ratio_k * share_k``: the factor a per-kind
    correction applies to the base prediction."""
    r = np.array([float(ratios[k]) for k in KINDS])
    out: np.ndarray = np.atleast_2d(share_rows) @ r
    return out
