"""A predictor's domain: what its training data covered, and whether a graph
lies so far outside it that the prediction is refused.

A learned predictor answers anything it is given, and far from its training
data it answers nonsense (a ResNet-18 on a predictor trained on NAS-Bench-201
CIFAR cells: 3.1e27 ms). Each device therefore knows its domain, from the
training-data summary of its manifest (``training_data``: FLOPs and node
ranges, batch sizes, op types) and, where the device folder holds one,
``domain.json`` (:data:`DOMAIN_FILE`, written by ``python -m
training.seernet.domain_summary`` from the same training graphs: those ranges
plus the weight size, the largest activation tensor and the attention length).

A graph is **far outside** (:func:`far_reasons`) when

* a size lies more than :data:`FAR_FACTOR` times beyond the trained range:
  the attention (key) length below the smallest trained or above the
  largest; FLOPs, node count, largest activation tensor and weight size
  above the largest (below the range a graph gets the warning only: a
  small model costs little, and the toy graphs of tests and tutorials are
  small);
* the batch size is over :data:`FAR_FACTOR` times the largest trained one;
* ops that no training graph held, nor an op of their generic cost kind
  (:func:`perfseer_rt.graph.ops.cost_kind`), do at least
  :data:`UNSEEN_FAR_SHARE` of its FLOPs or of its bytes moved.

Nearer misses stay warnings (:func:`perfseer_rt.predict.seernet_run.out_of_distribution`).
A far graph is a :class:`~perfseer_rt.errors.DomainError` (CLI exit 2, a
4xx from the service) unless the caller asks for an extrapolation; then the
prediction carries :func:`extrapolation_interval`: bounds as wide as the
factor by which the graph lies outside (at least 2x each way), with no stated
coverage, because nothing measured says what such a prediction is worth.

The functions take plain data (:meth:`Domain.from_summary` reads any
training-data summary), so a predictor of another kind (the GPU prior) can
call :func:`far_reasons` with its own summary.

Units: FLOPs; weights MiB; tensor sizes in elements; lengths in tokens.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from perfseer_rt.errors import DomainError
from perfseer_rt.graph import layout
from perfseer_rt.graph.ops import cost_kind

#: The device folder's file with the domain's extra ranges (optional).
DOMAIN_FILE = "domain.json"
#: A size more than this many times outside the trained range is far (two
#: doublings: within them a prediction gets the warning only).
FAR_FACTOR = 4.0
#: Share of a graph's FLOPs or bytes moved in unseen ops at which it is far.
UNSEEN_FAR_SHARE = 0.25
#: Least factor an extrapolation interval spans on each side.
MIN_EXTRAPOLATION_FACTOR = 2.0

_EDGE = layout.column_index(layout.EDGE_COLUMNS)
_NODE = layout.column_index(layout.NODE_COLUMNS)
_OP_COLUMNS = {i: c[3:] for i, c in enumerate(layout.NODE_COLUMNS) if c.startswith("op_")}


@dataclass(frozen=True)
class Span:
    """A closed range ``[lo, hi]`` of one size."""

    lo: float
    hi: float

    @classmethod
    def of(cls, d: Mapping[str, Any] | None) -> "Span | None":
        if not d or d.get("min") is None or d.get("max") is None:
            return None
        return cls(float(d["min"]), float(d["max"]))


@dataclass(frozen=True)
class Domain:
    """What a predictor's training graphs covered (None: not recorded)."""

    flops_total: Span | None = None
    nodes: Span | None = None
    weight_mb: Span | None = None
    tensor_elems: Span | None = None
    attention_length: Span | None = None
    batch_sizes: tuple[int, ...] = ()
    ops: frozenset[str] | None = None
    #: where the ranges come from (the manifest, ``domain.json``)
    source: str = ""
    #: training graphs that held attention (0: none did; None: not recorded)
    attention_graphs: int | None = None
    families: tuple[str, ...] = field(default=())

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any], extra: Mapping[str, Any] | None = None,
                     source: str = "training data summary") -> "Domain":
        """From a training-data summary (the manifest's ``training_data``
        layout: ``{"flops_total": {"min", "max"}, "nodes": ..., "batch_sizes":
        [...], "ops": {op: count}}``), completed by ``extra`` (the same keys
        plus ``weight_mb``, ``tensor_elems``, ``attention_length``,
        ``attention_graphs``) where the summary has no value."""
        d = {**dict(extra or {}), **{k: v for k, v in dict(summary).items() if v is not None}}
        ops = d.get("ops")
        return cls(flops_total=Span.of(d.get("flops_total")), nodes=Span.of(d.get("nodes")),
                   weight_mb=Span.of(d.get("weight_mb")), tensor_elems=Span.of(d.get("tensor_elems")),
                   attention_length=Span.of(d.get("attention_length")),
                   batch_sizes=tuple(int(b) for b in d.get("batch_sizes") or ()),
                   ops=frozenset(ops) if ops is not None else None, source=source,
                   attention_graphs=d.get("attention_graphs"),
                   families=tuple(sorted(d.get("families") or ())))


def read_extra(folder: Path) -> dict[str, Any] | None:
    """``domain.json`` of a device folder, or None where it has none.

    Raises:
        DomainError: the file is there but is not a JSON object.
    """
    path = Path(folder) / DOMAIN_FILE
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict):
            raise ValueError("not an object")
    except (OSError, ValueError) as exc:
        raise DomainError(f"{path}: unreadable domain file ({exc}); reinstall the predictor") from None
    return doc


# ------------------------------------------------------------ a graph's sizes
@dataclass(frozen=True)
class GraphSizes:
    """The sizes of one graph that a domain bounds."""

    flops_total: float
    nodes: int
    weight_mb: float
    tensor_elems: float  # the largest activation tensor (edge), elements
    attention_length: float  # longest attention key length (0: no attention)
    batch: int
    #: op type -> (share of FLOPs, share of bytes moved)
    op_shares: dict[str, tuple[float, float]]


def attention_lengths(ops: Sequence[str], edge_index: np.ndarray, edge_attr: np.ndarray) -> np.ndarray:
    """Key lengths of the score tensors that reach a ``Softmax``: from the edge
    slots (:mod:`perfseer_rt.graph.layout`), a rank-4 ``(B, heads, Sq, Sk)``
    tensor has ``Sk`` in ``width``; a rank-3 ``(B*heads, Sq, Sk)`` has ``Sk`` in
    ``channel`` and ``Sq`` in ``height``. A classifier's ``(B, classes)``
    softmax (height = width = 1) is not attention. Returns one length per such edge."""
    into = np.array([ops[int(t)] == "Softmax" for t in edge_index[1]], dtype=bool) if len(ops) else \
        np.zeros(0, bool)
    if not into.any():
        return np.zeros(0)
    e = edge_attr[into]
    width, height, channel = e[:, _EDGE["width"]], e[:, _EDGE["height"]], e[:, _EDGE["channel"]]
    key = np.where(width > 1, width, np.where(height > 1, channel, 0.0))
    return key[key > 0]


def sizes_of(ops: Sequence[str], x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray,
             u: np.ndarray) -> GraphSizes:
    """:class:`GraphSizes` from a graph's arrays (``ops``: one op type per node)."""
    glob = dict(zip(layout.GLOBAL_COLUMNS, np.asarray(u, dtype=np.float64).reshape(-1)))
    flops, mac = x[:, _NODE["flops"]], x[:, _NODE["mac"]]
    f_tot, m_tot = float(flops.sum()), float(mac.sum())
    arr = np.array(ops, dtype=object)
    shares = {}
    for op in set(ops):
        sel = arr == op
        shares[op] = (float(flops[sel].sum()) / f_tot if f_tot else 0.0,
                      float(mac[sel].sum()) / m_tot if m_tot else 0.0)
    att = attention_lengths(ops, edge_index, edge_attr)
    sizes = edge_attr[:, _EDGE["size"]] if len(edge_attr) else np.zeros(1)
    return GraphSizes(flops_total=float(glob["flops_total"]), nodes=len(ops),
                      weight_mb=float(glob["weight_total"]) / 2**20, tensor_elems=float(sizes.max()),
                      attention_length=float(att.max()) if len(att) else 0.0,
                      batch=int(glob["batch_size"]), op_shares=shares)


def graph_sizes(graph: Any) -> GraphSizes:
    """:class:`GraphSizes` of a PerfGraph."""
    return sizes_of(graph.node_ops, graph.x, graph.edge_index, graph.edge_attr, graph.u)


def ops_of_onehot(x: np.ndarray) -> list[str]:
    """One op type per node from the layout's one-hot columns (``"other"`` for
    an op outside the vocabulary): for stored training graphs."""
    cols = sorted(_OP_COLUMNS)
    return [_OP_COLUMNS[cols[int(i)]] for i in np.argmax(x[:, cols], axis=1)] if len(x) else []


# ------------------------------------------------------------------- the rule
def _factor_outside(span: Span | None, value: float, lower: bool = True) -> float:
    """How many times ``value`` lies beyond ``span`` (1.0 inside or unbounded)."""
    if span is None:
        return 1.0
    if value > span.hi:
        return value / span.hi if span.hi > 0 else math.inf
    if lower and value < span.lo:
        return span.lo / value if value > 0 else math.inf
    return 1.0


def unseen_share(domain: Domain, sizes: GraphSizes) -> tuple[float, list[str]]:
    """The largest of (FLOPs share, bytes share) in ops the domain never held
    nor an op of their cost kind, and those ops (empty when ops are not recorded)."""
    if domain.ops is None:
        return 0.0, []
    kinds = {cost_kind(op) for op in domain.ops} - {None}
    unseen = sorted(op for op in sizes.op_shares if op not in domain.ops and cost_kind(op) not in kinds)
    f = sum(sizes.op_shares[op][0] for op in unseen)
    m = sum(sizes.op_shares[op][1] for op in unseen)
    return max(f, m), unseen


def _outside(domain: Domain, sizes: GraphSizes) -> list[tuple[float, str]]:
    """``(factor, why)`` for every size of the graph outside the domain."""
    out = []
    checks = ((domain.flops_total, sizes.flops_total, "FLOPs", ".3g", False),
              (domain.nodes, sizes.nodes, "node count", ".0f", False),
              (domain.tensor_elems, sizes.tensor_elems, "largest activation tensor (elements)", ".3g", False),
              (domain.weight_mb, sizes.weight_mb, "weights (MiB)", ".4g", False),
              (domain.attention_length, sizes.attention_length, "attention length", ".0f", True))
    for span, value, what, fmt, lower in checks:
        if span is None or (what == "attention length" and value <= 0):
            continue
        f = _factor_outside(span, value, lower)
        if f > 1:
            out.append((f, f"{what} {value:{fmt}} is {f:.3g}x outside the trained range "
                           f"[{span.lo:{fmt}}, {span.hi:{fmt}}]"))
    if sizes.attention_length > 0 and domain.attention_length is None and domain.attention_graphs == 0:
        out.append((math.inf, "it has attention (a Softmax over keys) and no training graph had any"))
    if domain.batch_sizes and sizes.batch > max(domain.batch_sizes):
        f = sizes.batch / max(domain.batch_sizes)
        out.append((f, f"batch {sizes.batch} is {f:.3g}x the largest trained batch {max(domain.batch_sizes)}"))
    return out


def far_reasons(domain: Domain, sizes: GraphSizes) -> list[str]:
    """Why a graph of these sizes lies far outside ``domain`` (empty: it does not)."""
    reasons = [why for f, why in _outside(domain, sizes) if f > FAR_FACTOR]
    share, unseen = unseen_share(domain, sizes)
    if share >= UNSEEN_FAR_SHARE:
        reasons.append(f"ops no training graph held ({', '.join(unseen)}) do {share:.0%} of its work "
                       "(FLOPs or bytes moved)")
    return reasons


def extrapolation_factor(domain: Domain, sizes: GraphSizes) -> float:
    """The factor an extrapolated prediction's interval spans on each side:
    the largest factor by which a size lies outside the domain, or ``1 /
    (1 - share)`` of the work in unseen ops, at least
    :data:`MIN_EXTRAPOLATION_FACTOR` (capped at 1e6: finite)."""
    share, _ = unseen_share(domain, sizes)
    factors = [f for f, _ in _outside(domain, sizes)] + [1.0 / max(1.0 - share, 1e-6)]
    return float(min(max([MIN_EXTRAPOLATION_FACTOR] + factors), 1e6))


def extrapolation_interval(value: float, factor: float) -> list[float]:
    """``[value / factor, value * factor]``."""
    return [float(value / factor), float(value * factor)]


def check_values(values: np.ndarray, metrics: Sequence[str], names: Sequence[str]) -> None:
    """Every predicted value must be a finite positive number.

    Raises:
        DomainError: naming the model (``names``, one per row) and the metric.
    """
    values = np.asarray(values, dtype=np.float64)
    bad = ~(np.isfinite(values) & (values > 0))
    if bad.any():
        i, j = map(int, np.argwhere(bad)[0])
        raise DomainError(f"{names[i]}: the predictor gave {metrics[j]} = {values[i, j]!r}, not a finite "
                          "positive number; the model lies outside what it can predict", index=i)


# ------------------------------------------------------------- a predictor's
def of_predictor(manifest: Mapping[str, Any], folder: Path) -> Domain | None:
    """The domain of a device entry (its manifest and folder): the manifest's
    ``training_data`` with the folder's :data:`DOMAIN_FILE` over it; None
    where the manifest has no training-data summary."""
    summary = manifest.get("training_data")
    if not isinstance(summary, Mapping):
        return None
    extra = read_extra(folder)
    return Domain.from_summary(summary, extra, source=f"{folder / DOMAIN_FILE}" if extra else "manifest")


def screen(domain: Domain | None, graphs: Sequence[Any], names: Sequence[str], device: str,
           extrapolate: bool = False) -> list[tuple[float, list[str]] | None]:
    """Each graph's ``(extrapolation factor, reasons)`` where it lies far
    outside ``domain`` and ``extrapolate`` is set, else None (inside, or near
    enough for a warning only).

    Raises:
        DomainError: the first graph far outside, naming it, the device and
            why, unless ``extrapolate``.
    """
    out: list[tuple[float, list[str]] | None] = []
    for i, (g, name) in enumerate(zip(graphs, names)):
        if domain is None:
            out.append(None)
            continue
        sizes = graph_sizes(g)
        reasons = far_reasons(domain, sizes)
        if reasons and not extrapolate:
            raise DomainError(f"{name}: far outside what device {device!r} was trained on: "
                              + "; ".join(reasons) + " (--extrapolate to predict anyway, with an interval "
                              "that says how little it is worth)", index=i)
        out.append((extrapolation_factor(domain, sizes), reasons) if reasons else None)
    return out


EXTRAPOLATION_WARNING = ("extrapolated far outside the training data ({why}); the interval spans the factor "
                         "{factor:.3g} each way and no measurement says how often it holds")


def mark_extrapolated(result: dict[str, Any], factor: float, reasons: Sequence[str]) -> None:
    """Give each metric of a far graph's prediction the extrapolation interval
    (coverage None: not calibrated) and say so in its warnings."""
    for m in result["metrics"].values():
        m["interval"] = extrapolation_interval(m["value"], factor)
        m["coverage"] = None
    result["extrapolated"] = {"factor": factor, "reasons": list(reasons)}
    result["warnings"].append(EXTRAPOLATION_WARNING.format(why="; ".join(reasons), factor=factor))
