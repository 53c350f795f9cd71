"""Node, edge and global feature arrays of a PerfGraph from a shaped model
(:func:`node_arrays`, :func:`graph_globals`), in the layout of
:mod:`perfseer_rt.graph.layout`.

Speed: a node's features depend only on its signature (op, attributes,
input and output types, which inputs are constant); each is computed once
and kept, bounded, between calls (:func:`clear_feature_cache` empties the
cache; it never changes a result). Node columns go to numpy as the graph's
distinct feature rows plus an index per node, edge rows likewise per
distinct tensor type.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from perfseer_rt.errors import ShapeError
from perfseer_rt.graph import dtypes, layout
from perfseer_rt.graph.limits import Deadline
from perfseer_rt.graph.nodes import ATTRS, CACHED_KEY_CHARS, NAME, Row, has_subgraph
from perfseer_rt.graph.ops import PARAM_INPUTS, NodeCost, TensorInfo, is_known, node_cost
from perfseer_rt.graph.propagate import TypedShape
from perfseer_rt.graph.structure import structure_globals
from perfseer_rt.graph.subgraphs import CONTROL_FLOW

Shape = tuple[int, ...]

_NODE_IDX = layout.column_index(layout.NODE_COLUMNS)
_OP_COL = {op: _NODE_IDX[f"op_{op}"] for op in layout.OP_VOCAB}
_OTHER_COL = _NODE_IDX[f"op_{layout.OTHER_OP}"]
_HP_IDX = {c: _NODE_IDX[c] for c in layout.HPARAM_COLUMNS}
_COMPUTE_TYPES = dtypes.FLOAT_TYPES | dtypes.QUANT_TYPES

#: The generic node columns, in the order of ``NodeFeatures.cols`` (the
#: first is the index of the op's one-hot column).
_FEATURE_COLS = ("op", "in_elems", "out_elems", "num_inputs", "num_outputs", "in_channels",
                 "out_channels", "flops", "mac", "weight", "params", "ai")


#: Node columns of _FEATURE_COLS[1:].
_GENERIC_COLS = np.array([_NODE_IDX[c] for c in _FEATURE_COLS[1:]], dtype=np.intp)


class NodeFeatures(NamedTuple):
    """What one node contributes to the PerfGraph that depends only on its
    signature (op, attributes, input and output types, constant inputs)."""

    cols: tuple[float, ...]  # values of _FEATURE_COLS
    hp_keys: tuple[str, ...] | None  # the cost rule's hyper-parameter names
    hp_vals: tuple[float, ...]  # and values (empty without)
    compute: int  # compute element type
    flops: float
    unknown: str | None  # the entry in PerfGraph.unknown_ops, if any
    weight_pos: tuple[tuple[int, int, float, int], ...]  # (position, elems, bytes, elem type)
    data_pos: tuple[int, ...]  # positions of data inputs
    note: str | None  # a control-flow warning


#: Most node signatures whose features are kept between calls (the cache is
#: emptied when it is full): NAS-Bench-201-like batches of small models
#: repeat the same few dozen signatures across thousands of graphs.
SIGNATURE_CACHE_SIZE = 16384
#: node signature -> its features (a pure function of the signature; filled
#: by every extraction, see node_arrays).
_FEATURES: dict[tuple[Any, ...], NodeFeatures] = {}


def clear_feature_cache() -> None:
    """Empty the cache of features per node signature (speed only)."""
    _FEATURES.clear()


class NodeArrays(NamedTuple):
    """What :func:`node_arrays` builds of a shaped model's kept nodes."""

    x: np.ndarray  # node features (nodes x layout.NODE_COLUMNS)
    edge_index: np.ndarray  # (2, edges) int64: producer, reader
    edge_attr: np.ndarray  # edge features (edges x layout.EDGE_COLUMNS)
    edge_tensors: list[str]  # the tensor of each edge
    edge_shapes: list[Shape]
    unknown: list[str]  # PerfGraph.unknown_ops
    weight_uses: dict[str, int]  # weight (alias root) -> nodes reading it
    weight_sizes: dict[str, tuple[int, float, int]]  # -> (elems, bytes, elem type)
    flops_by_dtype: dict[int, float]  # by the compute element type of each node
    control_notes: list[str]  # the control-flow nodes' warnings


#: Node ``k``'s cost as a control-flow node: (cost, ruled, warning or None).
ControlCost = Callable[[int], "tuple[NodeCost, bool, str | None]"]


def node_arrays(name: str, rows: list[Row], akeys: list[str | None],
                node_outs: list[tuple[str, ...]], shapes: dict[str, TypedShape],
                counted: dict[str, int], const: set[str], derived: set[str],
                roots: dict[str, str], deadline: Deadline, control_cost: ControlCost
                ) -> NodeArrays:
    """The feature arrays of the kept nodes ``rows`` (their attribute keys
    ``akeys``; ``node_outs`` their outputs, unread ones blanked) at
    ``shapes``; ``counted``: element counts of the tensors they read and
    write; ``const``/``derived``: constant tensors and those of them
    computed from shapes (not weights); ``roots``: weight aliases;
    ``control_cost``: the cost of control-flow node ``k``."""
    ops = [r[0] for r in rows]
    node_ins = [r[3] for r in rows]
    itemsize: dict[int, float] = {}
    tinfo: dict[str, TensorInfo] = {}  # one TensorInfo per tensor, built on first use

    def info(t: str) -> TensorInfo:
        ti = tinfo.get(t)
        if ti is None:
            elem, shape = shapes[t]
            size = itemsize.get(elem)
            if size is None:
                size = itemsize[elem] = dtypes.itemsize(elem, f"tensor {t!r}")
            ti = tinfo[t] = TensorInfo(t, shape, size, counted.get(t))
        return ti

    compute_types = _COMPUTE_TYPES

    def node_features(k: int) -> NodeFeatures:
        """What node ``k`` contributes that depends only on its op,
        attributes, input and output types and which inputs are constant."""
        op = ops[k]
        node_in = node_ins[k]
        node_out = node_outs[k]
        params = PARAM_INPUTS.get(op)
        if params:
            ins = [(tinfo.get(t) or info(t)) if t and pos not in params else None
                   for pos, t in enumerate(node_in)]
        else:
            ins = [(tinfo.get(t) or info(t)) if t else None for t in node_in]
        outs = [tinfo.get(t) or info(t) for t in node_out if t]
        note = None
        if op in CONTROL_FLOW and has_subgraph(rows[k]):
            cost, ruled, note = control_cost(k)
        else:
            try:
                cost, ruled = node_cost(op, ins, outs, rows[k][ATTRS])
            except ShapeError as exc:  # a node its inputs' shapes do not fit
                raise ShapeError(f"{name}: node {rows[k][NAME] or op!r} ({op}): {exc}; the model "
                                 "is inconsistent at these input shapes (onnxruntime refuses such "
                                 "a node)") from None
        compute = None
        typed = shapes.get(node_in[0]) if node_in and node_in[0] else None
        if typed is not None and typed[0] in compute_types:
            compute = typed[0]  # the common case: the first input
        else:
            first_typed = None
            for t in (*node_in, *node_out):
                if t:
                    typed = shapes.get(t)
                    if typed is not None:
                        if first_typed is None:
                            first_typed = typed[0]
                        if typed[0] in compute_types:
                            compute = typed[0]
                            break
            if compute is None:
                compute = first_typed if first_typed is not None else 0
        flops = cost.flops
        data_bytes: float = 0
        weight_bytes: float = 0
        params_n = 0
        first_data = None
        weight_pos: list[tuple[int, int, float, int]] = []
        data_pos: list[int] = []
        for pos, (tname, ti) in enumerate(zip(node_in, ins)):
            if ti is None:
                continue
            if tname in const:
                weight_bytes += ti.nbytes
                params_n += ti.elems
                if tname not in derived:  # shape-derived: constant input, not a weight
                    weight_pos.append((pos, ti.elems, ti.nbytes, shapes[tname][0]))
            else:
                data_bytes += ti.nbytes
                if first_data is None:
                    first_data = ti
                data_pos.append(pos)
        out_bytes: float = 0
        out_n = 0
        for o in outs:
            out_bytes += o.nbytes
            out_n += o.elems
        mac = data_bytes + weight_bytes + out_bytes
        in_elems = in_ch = out_ch = 0.0
        first_in = first_data if first_data is not None else (ins[0] if ins and ins[0] else None)
        if first_in is not None:
            in_elems = float(first_in.elems)
            shape = first_in.shape  # its channel slot (ops.channel_dim)
            r = len(shape)
            in_ch = float(shape[1] if r > 3 or r == 2 else shape[2] if r == 3 else
                          shape[0] if r == 1 else 1)
        if outs:
            shape = outs[0].shape
            r = len(shape)
            out_ch = float(shape[1] if r > 3 or r == 2 else shape[2] if r == 3 else
                           shape[0] if r == 1 else 1)
        cols = (float(_OP_COL.get(op, _OTHER_COL)), in_elems, float(out_n), float(len(data_pos)),
                float(len(outs)), in_ch, out_ch, float(flops), float(mac), float(weight_bytes),
                float(params_n), flops / mac if mac else 0.0)
        hparams = cost.hparams
        return NodeFeatures(
            cols, tuple(hparams) if hparams else None,
            tuple(hparams.values()) if hparams else (), compute, float(flops),
            None if ruled else f"{op} (unreadable inputs)" if is_known(op) else op,
            tuple(weight_pos), tuple(data_pos), note)

    producer = {o: k for k, outs_ in enumerate(node_outs) for o in outs_ if o}
    n_nodes = len(rows)
    # A node's features are a function of its op, attributes, the types of
    # its inputs and outputs and which inputs are constant: real models
    # repeat a handful of such signatures (blocks, layers, cells), and so do
    # batches of related models, so each is computed once (node_features)
    # and looked up after, in this call and later ones; only edges and
    # weight uses, which depend on the tensors' identities, run per node.
    # Control flow is never looked up (its cost depends on its subgraphs).
    memo = _FEATURES
    # the node columns go to numpy as the graph's distinct features (uniq)
    # and one index per node: converting Python floats is the slow part
    uniq: list[NodeFeatures] = []
    uniq_at: dict[int, int] = {}  # id(features) -> position in uniq (uniq keeps them alive)
    node_feat: list[int] = []
    # the cost rules' hyper-parameters, grouped by their names (a Conv has
    # 13, always the same): one numpy assignment per group at the end
    hp_groups: dict[tuple[str, ...], tuple[list[int], list[int]]] = {}  # -> (nodes, uniq positions)
    unknown: list[str] = []
    src: list[int] = []
    dst: list[int] = []
    edge_tensors: list[str] = []
    weight_uses: dict[str, int] = {}
    flops_by_dtype: dict[int, float] = {}  # by the compute element type of each node
    control_notes: list[str] = []
    weight_sizes: dict[str, tuple[int, float, int]] = {}  # name -> (elems, bytes, elem type)
    shapes_get = shapes.get
    for k in range(n_nodes):
        if not k % 4096:
            deadline.check("node costs")
        op = ops[k]
        node_in = node_ins[k]
        row = rows[k]
        if op in CONTROL_FLOW and has_subgraph(row):
            feat = node_features(k)
            if feat.note:
                control_notes.append(feat.note)
        else:
            akey = akeys[k]
            key = (op, akey,
                   tuple([(shapes_get(t), (t in const) + (t in derived)) if t else None
                          for t in node_in]),
                   tuple([shapes_get(t) for t in node_outs[k]]))
            cached = memo.get(key)
            if cached is None:
                feat = node_features(k)
                if akey is None or len(akey) <= CACHED_KEY_CHARS:
                    if len(memo) >= SIGNATURE_CACHE_SIZE:
                        memo.clear()
                    memo[key] = feat
            else:
                feat = cached
        compute = feat.compute
        flops_by_dtype[compute] = flops_by_dtype.get(compute, 0) + feat.flops
        if feat.unknown is not None:
            unknown.append(feat.unknown)
        for pos, elems, nbytes, elem in feat.weight_pos:
            tname = node_in[pos]
            root = roots.get(tname, tname)  # aliases of one weight count once
            uses = weight_uses.get(root)
            if uses is None:
                weight_uses[root] = 1
                weight_sizes[root] = (elems, nbytes, elem)
            else:
                weight_uses[root] = uses + 1
                if weight_sizes[root][1] < nbytes:
                    weight_sizes[root] = (elems, nbytes, elem)
        linked: list[str] | None = None  # tensors this node already has an edge for
        for pos in feat.data_pos:
            tname = node_in[pos]
            p = producer.get(tname)
            if p is not None:
                if linked is None:
                    linked = [tname]
                elif tname in linked:
                    continue
                else:
                    linked.append(tname)
                src.append(p)
                dst.append(k)
                edge_tensors.append(tname)
        fi = uniq_at.get(id(feat))
        if fi is None:
            fi = uniq_at[id(feat)] = len(uniq)
            uniq.append(feat)
        node_feat.append(fi)
        if feat.hp_keys is not None:
            group = hp_groups.get(feat.hp_keys)
            if group is None:
                group = hp_groups[feat.hp_keys] = ([], [])
            group[0].append(k)
            group[1].append(fi)

    x = np.zeros((n_nodes, len(layout.NODE_COLUMNS)), dtype=np.float64)
    cols = np.array([f.cols for f in uniq], dtype=np.float64).reshape(
        len(uniq), len(_FEATURE_COLS))[np.array(node_feat, dtype=np.intp)]
    x[np.arange(n_nodes), cols[:, 0].astype(np.int64)] = 1.0
    x[:, _GENERIC_COLS] = cols[:, 1:]
    for keys, (hp_rows, hp_feats) in hp_groups.items():
        # the rules' hyper-parameters override the generic columns set above
        picked = _hp_columns(keys)
        if picked is not None:
            distinct = sorted(set(hp_feats))  # (np.unique costs ~0.1 ms a call)
            at = {fi: j for j, fi in enumerate(distinct)}
            table = np.array([uniq[i].hp_vals for i in distinct],  # float(v) of each,
                             dtype=np.float64)[[at[fi] for fi in hp_feats]]  # as numpy converts
            x[np.array(hp_rows)[:, None], picked[1]] = table[:, picked[0]]

    for col, src_col in (("flops_ratio", "flops"), ("mac_ratio", "mac"),
                         ("weight_ratio", "weight")):
        arr = x[:, _NODE_IDX[src_col]]
        total = arr.sum()
        x[:, _NODE_IDX[col]] = arr / total if total else 0.0

    edge_shapes = [shapes[t][1] for t in edge_tensors]
    # one row per distinct tensor type, indexed per edge (as the node columns)
    edge_rows: dict[str, int] = {}  # tensor -> its row
    by_type: dict[TypedShape, int] = {}
    rows_e: list[list[float]] = []
    edge_row_of: list[int] = []
    for t in edge_tensors:
        er = edge_rows.get(t)
        if er is None:
            typed = shapes[t]
            er = by_type.get(typed)
            if er is None:
                size = itemsize.get(typed[0])
                if size is None:  # only cached nodes read it: a known type
                    size = itemsize[typed[0]] = dtypes.itemsize(typed[0], f"tensor {t!r}")
                er = by_type[typed] = len(rows_e)
                rows_e.append(_edge_row(typed[1], size, counted[t]))
            edge_rows[t] = er
        edge_row_of.append(er)
    edge_attr = np.array(rows_e, dtype=np.float64).reshape(
        len(rows_e), len(layout.EDGE_COLUMNS))[np.array(edge_row_of, dtype=np.intp)]
    edge_index = np.array([src, dst], dtype=np.int64).reshape(2, len(src))
    return NodeArrays(x, edge_index, edge_attr, edge_tensors, edge_shapes, unknown, weight_uses,
                      weight_sizes, flops_by_dtype, control_notes)


def _edge_row(shape: Shape, itemsize: float, elems: int) -> list[float]:
    """Edge features of a tensor of this shape, element size and element
    count (shape slots per the layout's docstring).

    Products are exact integers converted once to float: every edge tensor
    has at most MAX_ELEMS (2^40) elements, so this equals a float64 product.
    """
    r = len(shape)
    size = float(elems)
    slots: tuple[int, ...]
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
        slots = (shape[0], shape[1], math.prod(shape[2:-1]), shape[-1])
    return [size, *map(float, slots), float(itemsize)]


def _median(col: np.ndarray) -> float:
    """``float(np.median(col))`` of a non-empty finite column, without
    np.median's wrapper overhead (the same partition and mean)."""
    n = col.shape[0]
    k = n // 2
    if n % 2:
        return float(np.partition(col, k)[k])
    return float(np.mean(np.partition(col, [k - 1, k])[k - 1:k + 1]))


_HP_COLUMNS: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray] | None] = {}


def _hp_columns(keys: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """(positions in ``keys``, node columns) of the hyper-parameters that
    are layout columns (None: none is); per cost rule's names, cached."""
    if keys in _HP_COLUMNS:
        return _HP_COLUMNS[keys]
    picked = [(i, _HP_IDX[c]) for i, c in enumerate(keys) if c in _HP_IDX]
    found = (np.array([i for i, _ in picked], dtype=np.intp),
             np.array([j for _, j in picked], dtype=np.intp)) if picked else None
    if len(_HP_COLUMNS) < SIGNATURE_CACHE_SIZE:
        _HP_COLUMNS[keys] = found
    return found


def graph_globals(x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray, batch_size: int,
             params_unique: float, bytes_unique: float) -> np.ndarray:
    """Global features u in the order of ``layout.GLOBAL_COLUMNS`` (the
    structure columns from :func:`perfseer_rt.graph.structure.structure_globals`).

    ``params_total`` and ``weight_total`` count each weight tensor once
    however many nodes read it (tied weights); the per-node ``weight``
    statistics (mean, median, max) stay per use.
    """
    n = x.shape[0]
    e = edge_attr.shape[0]
    vals = {"num_nodes": n, "num_edges": e,
            "density": e / (n * (n - 1)) if n > 1 else 0.0, "batch_size": batch_size}
    for name in ("flops", "mac", "weight"):
        col = x[:, _NODE_IDX[name]]
        total = vals[f"{name}_total"] = col.sum()
        vals[f"{name}_mean"] = total / n  # what col.mean() computes, without its wrapper
        vals[f"{name}_median"] = _median(col)
        vals[f"{name}_max"] = col.max()
    vals["weight_total"] = bytes_unique
    vals["params_total"] = params_unique
    vals["edge_size_mean"] = edge_attr[:, 0].mean() if e else 0.0
    vals["ai_model"] = vals["flops_total"] / vals["mac_total"] if vals["mac_total"] else 0.0
    base = np.array([float(vals[c]) for c in layout.BASE_GLOBAL_COLUMNS], dtype=np.float64)
    return np.concatenate([base, structure_globals(x, edge_index, edge_attr, bytes_unique)])
