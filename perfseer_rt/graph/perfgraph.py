"""The PerfGraph IR: a model as ``G = (u, V, E)`` (paper 001, section 3.1).

A :class:`PerfGraph` holds plain numpy arrays whose columns are named in
:mod:`perfseer_rt.graph.layout`; extraction produces it, the predictors and
``training/`` consume it.
"""

from __future__ import annotations

import io
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfseer_rt.errors import GraphError, OutputError, PerfSeerError
from perfseer_rt.graph import layout
from perfseer_rt.graph.structure import upgrade_globals


@dataclass
class PerfGraph:
    """A PerfGraph: node, edge and global features plus topology.

    Attributes:
        node_names: ONNX node names, one per node (``N``).
        node_ops: ONNX op types, one per node.
        x: node features, ``float64[N, len(layout.NODE_COLUMNS)]``.
        edge_index: ``int64[2, E]``; row 0 source node, row 1 target node.
        edge_attr: edge features, ``float64[E, len(layout.EDGE_COLUMNS)]``.
        edge_tensors: the ONNX tensor name carried by each edge.
        edge_shapes: the full tensor shape carried by each edge.
        u: global features, ``float64[len(layout.GLOBAL_COLUMNS)]``.
        feature_version: layout version the arrays follow.
        unknown_ops: op types that got the generic cost rule.
        input_shapes: the resolved shape of every graph input.
        info: facts about the model that are not features (dominant dtype,
            unique params and weight bytes, shared weights, weight inputs).
        warnings: what a user should know about this extraction.

    Construction checks that every feature is finite and non-negative
    (:class:`~perfseer_rt.errors.GraphError` otherwise).
    """

    node_names: list[str]
    node_ops: list[str]
    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    edge_tensors: list[str]
    edge_shapes: list[tuple[int, ...]]
    u: np.ndarray
    feature_version: str = layout.FEATURE_VERSION
    unknown_ops: list[str] = field(default_factory=list)
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    node_columns = layout.NODE_COLUMNS
    edge_columns = layout.EDGE_COLUMNS
    global_columns = layout.GLOBAL_COLUMNS

    def __post_init__(self) -> None:
        for label, arr in (("node", self.x), ("edge", self.edge_attr), ("global", self.u)):
            a = np.asarray(arr)
            if a.size and not (np.isfinite(a).all() and (a >= 0).all()):
                raise GraphError(f"{label} features hold a negative or non-finite value; "
                                 "the model's shapes or attributes are not plausible")

    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    def node_column(self, name: str) -> np.ndarray:
        """One node feature column by name, e.g. ``g.node_column("flops")``."""
        return self.x[:, _NODE_IDX[name]]

    def edge_column(self, name: str) -> np.ndarray:
        return self.edge_attr[:, _EDGE_IDX[name]]

    @property
    def globals(self) -> dict[str, float]:
        """Global features as a name -> value mapping."""
        return {name: _num(v) for name, v in zip(layout.GLOBAL_COLUMNS, self.u)}

    # ------------------------------------------------------------------ views
    def to_networkx(self) -> Any:
        """A ``networkx.DiGraph``: node attributes are the named features plus
        ``op`` and ``name``; parallel tensors between one pair of nodes are
        merged into one edge whose ``tensors`` attribute lists them."""
        # lazy: networkx is an optional extra (perfseer-rt[networkx])
        import networkx as nx

        g = nx.DiGraph(**self.globals, feature_version=self.feature_version)
        for i, (name, op) in enumerate(zip(self.node_names, self.node_ops)):
            attrs = {c: _num(v) for c, v in zip(layout.NODE_COLUMNS, self.x[i])}
            g.add_node(i, name=name, op=op, **attrs)
        for j in range(self.num_edges):
            s, t = int(self.edge_index[0, j]), int(self.edge_index[1, j])
            feats = {c: _num(v) for c, v in zip(layout.EDGE_COLUMNS, self.edge_attr[j])}
            if g.has_edge(s, t):
                g.edges[s, t]["tensors"].append(self.edge_tensors[j])
                g.edges[s, t]["size"] += feats["size"]
            else:
                g.add_edge(s, t, tensors=[self.edge_tensors[j]],
                           shape=list(self.edge_shapes[j]), **feats)
        return g

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form printed by ``perfseer-rt extract --json``."""
        nodes = []
        for i, (name, op) in enumerate(zip(self.node_names, self.node_ops)):
            row: dict[str, str | float] = {"name": name, "op": op}
            row.update({c: _num(v) for c, v in zip(layout.NODE_COLUMNS, self.x[i])
                        if not c.startswith("op_")})
            nodes.append(row)
        edges = [
            {"src": int(self.edge_index[0, j]), "dst": int(self.edge_index[1, j]),
             "tensor": self.edge_tensors[j], "shape": list(self.edge_shapes[j]),
             **{c: _num(v) for c, v in zip(layout.EDGE_COLUMNS, self.edge_attr[j])}}
            for j in range(self.num_edges)
        ]
        return {
            "feature_version": self.feature_version,
            "input_shapes": {k: list(v) for k, v in self.input_shapes.items()},
            "unknown_ops": list(self.unknown_ops),
            "warnings": list(self.warnings),
            "info": dict(self.info),
            "global": self.globals,
            "nodes": nodes,
            "edges": edges,
        }

    # ------------------------------------------------------------------ files
    def save_npz(self, path: str | os.PathLike[str]) -> None:
        """Write the arrays to ``path`` atomically (temp file + rename)."""
        buf = io.BytesIO()
        np.savez_compressed(
            buf,
            x=self.x, edge_index=self.edge_index, edge_attr=self.edge_attr, u=self.u,
            node_names=np.array(self.node_names, dtype=str),
            node_ops=np.array(self.node_ops, dtype=str),
            edge_tensors=np.array(self.edge_tensors, dtype=str),
            node_columns=np.array(layout.NODE_COLUMNS, dtype=str),
            edge_columns=np.array(layout.EDGE_COLUMNS, dtype=str),
            global_columns=np.array(layout.GLOBAL_COLUMNS, dtype=str),
            feature_version=np.array(self.feature_version),
        )
        atomic_write_bytes(path, buf.getvalue())

    @classmethod
    def load_npz(cls, path: str | os.PathLike[str]) -> "PerfGraph":
        with np.load(path, allow_pickle=False) as z:
            version = str(z["feature_version"])
            try:  # an older layout's globals are upgraded (perfseer_rt.graph.structure)
                u = upgrade_globals(version, z["x"], z["edge_index"], z["edge_attr"], z["u"])
            except ValueError as e:
                raise PerfSeerError(f"{path}: {e}; re-extract the model") from None
            return cls(
                node_names=[str(s) for s in z["node_names"]],
                node_ops=[str(s) for s in z["node_ops"]],
                x=z["x"], edge_index=z["edge_index"], edge_attr=z["edge_attr"],
                edge_tensors=[str(s) for s in z["edge_tensors"]],
                edge_shapes=[], u=u, feature_version=layout.FEATURE_VERSION)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so that no partial file is ever visible.

    Raises:
        OutputError: ``path`` names a folder (or ends with a separator), its
            folder does not exist, or the file cannot be written there.
    """
    text = os.fspath(path)
    path = Path(path)
    if text.endswith((os.sep, "/")) or path.is_dir():
        raise OutputError(f"{text}: is a folder; give the output file's name")
    if not path.parent.is_dir():
        raise OutputError(f"{text}: folder {str(path.parent)!r} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OutputError(f"{text}: cannot write there ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as exc:
        _unlink(tmp)
        raise OutputError(f"{text}: cannot write there ({exc.strerror or exc})") from None
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(path: str) -> None:
    """Remove a temp file that may be gone already."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _num(v: Any) -> float | int:
    """A numpy scalar as a plain Python int where integral, else float."""
    f = float(v)
    return int(f) if f.is_integer() and abs(f) < 2**53 else f


_NODE_IDX = layout.column_index(layout.NODE_COLUMNS)
_EDGE_IDX = layout.column_index(layout.EDGE_COLUMNS)
