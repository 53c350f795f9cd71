"""ONNX model -> :class:`PerfGraph` (paper 001, section 3.1).

The pipeline: load (no external data) -> resolve input shapes -> shape
inference on a weight-free skeleton -> fold constants and shape subgraphs ->
per-node costs (:mod:`perfseer_rt.graph.ops`) -> node, edge and global
feature arrays in the layout of :mod:`perfseer_rt.graph.layout`.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import helper

from perfseer_rt.errors import ShapeError
from perfseer_rt.graph import layout
from perfseer_rt.graph.fold import fold_static
from perfseer_rt.graph.load import load_model
from perfseer_rt.graph.ops import (PARAM_INPUTS, TensorInfo, channel_dim, dtype_itemsize,
                                   is_known, node_cost)
from perfseer_rt.graph.perfgraph import PerfGraph
from perfseer_rt.graph.shapes import infer_shapes, resolve_inputs, skeleton

log = logging.getLogger(__name__)

_NODE_IDX = layout.column_index(layout.NODE_COLUMNS)
_OP_COL = {op: _NODE_IDX[f"op_{op}"] for op in layout.OP_VOCAB}
_OTHER_COL = _NODE_IDX[f"op_{layout.OTHER_OP}"]
_HP_COLS = set(layout.HPARAM_COLUMNS)
_ITEMSIZE: dict[int, int] = {}


def extract(model, batch: int | None = None,
            input_shapes: dict[str, tuple[int, ...]] | None = None) -> PerfGraph:
    """Extract the PerfGraph of an ONNX model.

    Args:
        model: a path, the file's bytes, or an ``onnx.ModelProto``. External
            weight data is never read, so structure-only models work.
        batch: batch size; fills a dynamic first dim of every input (default
            1) and is checked against static first dims.
        input_shapes: explicit static shapes by input name, for inputs with
            other dynamic dims (e.g. sequence length).

    Raises:
        ModelLoadError: missing, non-ONNX or truncated model.
        ShapeError: a dynamic dim that cannot be resolved, or tensors whose
            shape neither shape-inference engine could determine.
    """
    proto, name = load_model(model)
    inputs = resolve_inputs(proto, batch, input_shapes)
    sk = skeleton(proto, inputs)
    inits = {t.name for t in proto.graph.initializer}
    inits.update(t.values.name for t in proto.graph.sparse_initializer)
    const, kept = fold_static(sk, inits)
    nodes = [sk.graph.node[i] for i in kept]
    if not nodes:
        raise ShapeError(f"{name}: every node folds to a constant; nothing to extract")

    needed = {t for n in nodes for t in _costed_tensors(n)}
    kept_set = set(kept)
    folded = [n for i, n in enumerate(sk.graph.node) if i not in kept_set]
    shapes, engine = infer_shapes(sk, needed, folded)
    shapes = _assume_unknown_op_shapes(sk, nodes, shapes, needed, folded)
    missing = sorted(needed - shapes.keys())
    if missing:
        raise ShapeError(
            f"{name}: shape of tensor {missing[0]!r} could not be inferred ({len(missing)} "
            f"tensors unresolved, engine: {engine}); give static input shapes with --input")
    log.debug("%s: shapes from %s", name, engine)

    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    x = np.zeros((len(nodes), len(layout.NODE_COLUMNS)), dtype=np.float64)
    unknown: list[str] = []
    src, dst, edge_tensors = [], [], []
    for k, node in enumerate(nodes):
        op = node.op_type
        params = PARAM_INPUTS.get(op, frozenset())
        ins = [_info(t, shapes) if t and pos not in params else None
               for pos, t in enumerate(node.input)]
        outs = [_info(t, shapes) for t in node.output if t]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
                 if a.type not in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)}
        cost, ruled = node_cost(op, ins, outs, attrs)
        if not ruled:
            unknown.append(f"{op} (unreadable inputs)" if is_known(op) else op)

        data_bytes = weight_bytes = params_n = 0
        data_ins: list[TensorInfo] = []
        node_edges: set[tuple[int, str]] = set()
        for pos, (tname, info) in enumerate(zip(node.input, ins)):
            if info is None or pos in params:
                continue
            if tname in const:
                weight_bytes += info.nbytes
                params_n += info.elems
            else:
                data_bytes += info.nbytes
                data_ins.append(info)
                p = producer.get(tname)
                if p is not None and (p, tname) not in node_edges:
                    node_edges.add((p, tname))
                    src.append(p)
                    dst.append(k)
                    edge_tensors.append(tname)
        out_bytes = sum(t.nbytes for t in outs)
        mac = data_bytes + weight_bytes + out_bytes

        row = x[k]
        row[_OP_COL.get(op, _OTHER_COL)] = 1.0
        first_in = data_ins[0] if data_ins else (ins[0] if ins and ins[0] else None)
        hp = {"in_elems": first_in.elems if first_in else 0,
              "out_elems": sum(t.elems for t in outs),
              "num_inputs": len(data_ins), "num_outputs": len(outs),
              "in_channels": channel_dim(first_in.shape) if first_in else 0,
              "out_channels": channel_dim(outs[0].shape) if outs else 0}
        hp.update(cost.hparams)
        for col, val in hp.items():
            if col in _HP_COLS:
                row[_NODE_IDX[col]] = float(val)
        row[_NODE_IDX["flops"]] = float(cost.flops)
        row[_NODE_IDX["mac"]] = float(mac)
        row[_NODE_IDX["weight"]] = float(weight_bytes)
        row[_NODE_IDX["params"]] = float(params_n)
        row[_NODE_IDX["ai"]] = cost.flops / mac if mac else 0.0

    flops, mac, weight = (x[:, _NODE_IDX[c]] for c in ("flops", "mac", "weight"))
    for col, arr in (("flops_ratio", flops), ("mac_ratio", mac), ("weight_ratio", weight)):
        total = arr.sum()
        x[:, _NODE_IDX[col]] = arr / total if total else 0.0

    edge_shapes = [shapes[t][1] for t in edge_tensors]
    edge_attr = np.array([_edge_row(shapes[t]) for t in edge_tensors],
                         dtype=np.float64).reshape(len(edge_tensors), len(layout.EDGE_COLUMNS))
    edge_index = np.array([src, dst], dtype=np.int64).reshape(2, len(src))

    first = next(iter(inputs.values()), ())
    batch_size = batch if batch is not None else (first[0] if first else 1)
    u = _globals(x, edge_attr, batch_size)
    return PerfGraph(
        node_names=[n.name or f"{n.op_type}_{i}" for i, n in enumerate(nodes)],
        node_ops=[n.op_type for n in nodes], x=x, edge_index=edge_index,
        edge_attr=edge_attr, edge_tensors=edge_tensors, edge_shapes=edge_shapes, u=u,
        unknown_ops=unknown, input_shapes=inputs)


def _costed_tensors(node) -> list[str]:
    """Tensors whose shapes the costs need: outputs and non-parameter inputs."""
    params = PARAM_INPUTS.get(node.op_type, frozenset())
    return [t for pos, t in enumerate(node.input) if t and pos not in params] + \
        [t for t in node.output if t]


def _itemsize(elem_type: int) -> int:
    size = _ITEMSIZE.get(elem_type)
    if size is None:
        size = _ITEMSIZE[elem_type] = dtype_itemsize(elem_type)
    return size


def _info(name: str, shapes) -> TensorInfo:
    elem, shape = shapes[name]
    return TensorInfo(name, shape, _itemsize(elem))


def _edge_row(typed) -> list[float]:
    """Edge features of a tensor (shape slots per the layout's docstring)."""
    elem, shape = typed
    r = len(shape)
    size = float(np.prod(shape)) if shape else 1.0
    if r == 0:
        slots = (1, 1, 1, 1)
    elif r == 1:
        slots = (1, shape[0], 1, 1)
    elif r == 2:
        slots = (shape[0], shape[1], 1, 1)
    elif r == 3:
        slots = (shape[0], shape[2], shape[1], 1)
    elif r == 4:
        slots = shape
    else:
        slots = (shape[0], shape[1], int(np.prod(shape[2:-1])), shape[-1])
    return [size, *map(float, slots), float(_itemsize(elem))]


def _assume_unknown_op_shapes(sk, nodes, shapes, needed, folded):
    """Outputs of ops no engine can infer (custom domains) are assumed to keep
    the shape and type of their first input; inference is re-run from there
    so that the rest of the graph resolves. Documented generic rule."""
    for _ in range(8):
        todo = [n for n in nodes if any(o and o not in shapes for o in n.output)
                and n.input and n.input[0] in shapes]
        if not todo:
            return shapes
        extra = []
        for n in todo:
            elem, shape = shapes[n.input[0]]
            extra += [helper.make_tensor_value_info(o, elem, list(shape))
                      for o in n.output if o and o not in shapes]
        sk.graph.value_info.extend(extra)
        new, _ = infer_shapes(sk, needed, folded)
        if len(new) <= len(shapes):
            return shapes
        shapes = new
    return shapes


def _globals(x: np.ndarray, edge_attr: np.ndarray, batch_size: int) -> np.ndarray:
    """Global features u in the order of ``layout.GLOBAL_COLUMNS``."""
    n = x.shape[0]
    e = edge_attr.shape[0]
    vals = {"num_nodes": n, "num_edges": e,
            "density": e / (n * (n - 1)) if n > 1 else 0.0, "batch_size": batch_size}
    for name in ("flops", "mac", "weight"):
        col = x[:, _NODE_IDX[name]]
        vals[f"{name}_total"] = col.sum()
        vals[f"{name}_mean"] = col.mean()
        vals[f"{name}_median"] = float(np.median(col))
        vals[f"{name}_max"] = col.max()
    vals["params_total"] = x[:, _NODE_IDX["params"]].sum()
    vals["edge_size_mean"] = edge_attr[:, 0].mean() if e else 0.0
    vals["ai_model"] = vals["flops_total"] / vals["mac_total"] if vals["mac_total"] else 0.0
    return np.array([float(vals[c]) for c in layout.GLOBAL_COLUMNS], dtype=np.float64)
