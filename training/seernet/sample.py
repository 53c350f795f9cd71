"""One training example (:class:`GraphSample`) and batching of many into one.

A mini-batch of graphs is one big disjoint graph, as in PyG: node, edge and
global arrays are concatenated, edge indices are shifted by the node offset of
their graph, and ``node_batch[i]`` names the graph of node ``i``. These are
exactly the inputs of the exported ONNX predictor, so the runtime batches
graphs the same way: :func:`concat_graphs` is the runtime's own
(:mod:`perfseer_rt.predict.manifest`), imported here.

Shapes (one batch of ``G`` graphs, ``N`` nodes, ``E`` edges, ``M`` metrics):
    x ``[N, Fn]``, edge_index ``[2, E]`` (int64), edge_attr ``[E, Fe]``,
    u ``[G, Fg]``, node_batch ``[N]`` (int64), y ``[G, M]`` (NaN = missing).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import torch

from perfseer_rt.graph import layout
from perfseer_rt.predict.manifest import concat_graphs

__all__ = ["GraphSample", "GraphBatch", "from_perfgraph", "collate", "concat_graphs"]


@dataclass
class GraphSample:
    """A PerfGraph's arrays plus its measured metrics and bookkeeping.

    Attributes:
        x: node features ``[N, len(layout.NODE_COLUMNS)]``.
        edge_index: ``int64[2, E]``, row 0 source, row 1 target (local ids).
        edge_attr: edge features ``[E, len(layout.EDGE_COLUMNS)]``.
        u: global features ``[len(layout.GLOBAL_COLUMNS)]``.
        targets: metric name -> measured value in the metric's unit
            (e.g. ``{"latency_ms": 3.2}``); a metric may be absent.
        arch_id: architecture id; every batch size of one architecture
            shares it (splits are by architecture).
        family: model family (``"resnet"``, ``"perfseer_space"``, ...).
        batch: batch size of this configuration.
        split_arch, split_family, split_real: ``"train"``/``"val"``/``"test"``
            or ``""`` (``split_real``: published architectures of held-out
            groups are test, :mod:`training.dataset.splits`).
        key: the graph key of the dataset record, for tracing back.
    """

    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    u: np.ndarray
    targets: dict[str, float]
    arch_id: str
    family: str
    batch: int
    split_arch: str = ""
    split_family: str = ""
    split_real: str = ""
    key: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    def with_arrays(self, x: np.ndarray, edge_attr: np.ndarray, u: np.ndarray) -> "GraphSample":
        """A copy with other feature arrays (used by normalization)."""
        return replace(self, x=x, edge_attr=edge_attr, u=u)


def from_perfgraph(graph, targets: dict[str, float], *, arch_id: str = "", family: str = "",
                   batch: int | None = None, **kwargs) -> GraphSample:
    """A :class:`GraphSample` from a :class:`perfseer_rt.graph.perfgraph.PerfGraph`.

    ``batch`` defaults to the graph's ``batch_size`` global feature. Extra
    keyword arguments (``split_arch``, ``split_family``, ``key``) are passed on.
    """
    if graph.feature_version != layout.FEATURE_VERSION:
        raise ValueError(f"graph has feature layout {graph.feature_version!r}, training "
                         f"expects {layout.FEATURE_VERSION!r}; re-extract it")
    if batch is None:
        batch = int(graph.u[layout.GLOBAL_COLUMNS.index("batch_size")])
    return GraphSample(
        x=np.asarray(graph.x), edge_index=np.asarray(graph.edge_index, dtype=np.int64),
        edge_attr=np.asarray(graph.edge_attr).reshape(-1, len(layout.EDGE_COLUMNS)),
        u=np.asarray(graph.u),
        targets={k: float(v) for k, v in targets.items()},
        arch_id=arch_id, family=family, batch=int(batch), **kwargs)


@dataclass
class GraphBatch:
    """Many graphs as one disjoint graph, as torch tensors (see module doc)."""

    x: torch.Tensor
    edge_index: torch.Tensor
    edge_attr: torch.Tensor
    u: torch.Tensor
    node_batch: torch.Tensor
    y: torch.Tensor
    metrics: tuple[str, ...]

    @property
    def num_graphs(self) -> int:
        return int(self.u.shape[0])

    def inputs(self) -> tuple[torch.Tensor, ...]:
        """The positional inputs of every model: ``(x, edge_index, edge_attr, u, node_batch)``."""
        return self.x, self.edge_index, self.edge_attr, self.u, self.node_batch


def collate(samples: Sequence[GraphSample], metrics: Sequence[str] = ()) -> GraphBatch:
    """Concatenate ``samples`` into a :class:`GraphBatch`; ``y[g, m]`` is the
    target ``metrics[m]`` of graph ``g`` (NaN where the sample lacks it)."""
    arrays = concat_graphs([s.x for s in samples], [s.edge_index for s in samples],
                           [s.edge_attr for s in samples], [s.u for s in samples])
    y = np.array([[s.targets.get(m, np.nan) for m in metrics] for s in samples],
                 dtype=np.float64).reshape(len(samples), len(metrics))
    return GraphBatch(
        x=torch.from_numpy(arrays["x"]), edge_index=torch.from_numpy(arrays["edge_index"]),
        edge_attr=torch.from_numpy(arrays["edge_attr"]), u=torch.from_numpy(arrays["u"]),
        node_batch=torch.from_numpy(arrays["node_batch"]), y=torch.from_numpy(y),
        metrics=tuple(metrics))
