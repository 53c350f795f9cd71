"""One extraction of a prepared model at one set of input shapes
(:func:`extract_shaped`): the tensors the features need, their shapes
(:mod:`perfseer_rt.graph.completion`), the feature arrays
(:mod:`perfseer_rt.graph.features`), control flow costed through its
subgraphs (:mod:`perfseer_rt.graph.control_flow`), and the PerfGraph with
its info and warnings (:mod:`perfseer_rt.graph.model_info`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import numpy as np
import onnx

from perfseer_rt.errors import GraphError, LimitError, PerfSeerError, ShapeError
from perfseer_rt.graph import data_dependent
from perfseer_rt.graph.completion import resolve_shapes
from perfseer_rt.graph.contrib import ONNX_DOMAIN_CONTRIB
from perfseer_rt.graph.control_flow import Chosen, control_flow_cost
from perfseer_rt.graph.exporter import TORCH_DYNAMO
from perfseer_rt.graph.features import graph_globals, node_arrays
from perfseer_rt.graph.implied import IMPLIED_DIM_WARNING
from perfseer_rt.graph.limits import MAX_ELEMS, Deadline
from perfseer_rt.graph.model_info import (
    DYNAMO_WARNING,
    EXTERNAL_WEIGHTS_WARN_SHARE,
    EXTERNAL_WEIGHTS_WARNING,
    FIXED_SHAPES_WARNING,
    GUESSED_SHAPE_WARNING,
    UNREAD_OUTPUT_WARNING,
    model_info,
    op_counts,
)
from perfseer_rt.graph.nodes import DOMAIN, INS, OTHER, OUTS, Row, has_subgraph
from perfseer_rt.graph.ops import PARAM_INPUTS, NodeCost
from perfseer_rt.graph.perfgraph import PerfGraph
from perfseer_rt.graph.prepared import PreparedModel
from perfseer_rt.graph.propagate import TypedShape, schema_attributes
from perfseer_rt.graph.shapes import refusal
from perfseer_rt.graph.subgraphs import body_key, free_tensors, subgraph_model
from perfseer_rt.graph.validate import SUBGRAPH_NAME, default_opset

log = logging.getLogger(__name__)
Shape = tuple[int, ...]


def extract_shaped(st: PreparedModel, batch: int | None, input_shapes: dict[str, Shape] | None,
                    dims: dict[str, int] | None, deadline: Deadline, depth: int = 0,
                    reuse_skeleton: bool = False,
                    chosen: Chosen | None = None) -> PerfGraph:
    """The PerfGraph of a validated, folded model at one set of input shapes.
    ``chosen`` collects each If's heavier branch (first output -> (branch,
    FLOPs, label))."""
    proto, name, max_nodes, weights = st.proto, st.name, st.max_nodes, st.weights
    inputs, implied = st.resolve(batch, input_shapes, dims, deadline)
    const, derived, kept, roots = st.const, st.derived, st.kept, st.roots
    if not kept:
        raise ShapeError(f"{name}: every node folds to a constant; nothing to extract")
    deadline.check("folding")

    rows = [st.table[i] for i in kept]
    akeys = [st.akeys[i] for i in kept]
    ops = [r[0] for r in rows]
    node_ins = [r[3] for r in rows]
    node_outs = [r[4] for r in rows]
    # the tensors whose shapes the features need, in node order (an error
    # about them names the first, whatever the process's string hashing)
    ordered: dict[str, None] = {}
    for op, ins_, outs_ in zip(ops, node_ins, node_outs):
        params = PARAM_INPUTS.get(op)
        if params:
            ordered.update((t, None) for pos, t in enumerate(ins_) if t and pos not in params)
        else:
            for t in ins_:
                ordered[t] = None
        for t in outs_:
            ordered[t] = None
    ordered.pop("", None)
    needed = set(ordered)
    shapes, engine, completion = resolve_shapes(st, inputs, needed, deadline, depth,
                                              reuse_skeleton)
    known_trips = completion.trips if completion is not None else {}
    taken = completion.taken if completion is not None else {}
    producers = completion.producers() if completion is not None else None
    missing = sorted(needed - shapes.keys())
    unread = _unread_outputs(missing, st.proto, st.table) if missing else []
    if unread:  # left out of their nodes' features, with a warning
        drop = set(unread)
        node_outs = [outs_ if drop.isdisjoint(outs_) else tuple("" if o in drop else o for o in outs_)
                     for outs_ in node_outs]
        for t in unread:
            del ordered[t]
        missing = [m for m in missing if m not in drop]
    if missing:
        shown = ", ".join(repr(m) for m in missing[:8])
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        head = (f"{name}: the shapes of {len(missing)} tensor(s) could not be inferred "
                f"(engine: {engine}): {shown}{more}")
        foreign = _not_onnx_ops(st.table, st.proto)
        # a clash is the file's only where no size was assumed at a bound
        bounded = completion is not None and bool(completion.assumed or completion.routed)
        refused = None if foreign or bounded else refusal(st.proto, shapes)
        if refused:
            raise ShapeError(f"{head}; {refused}: the model is inconsistent at these input "
                             "shapes (onnxruntime refuses such a file; if other input sizes "
                             "are valid, give them with --input or --dim)")
        why = (f"; the model has ops that are not ONNX operators at its opset ({foreign}), "
               "which onnxruntime refuses: its converter left them in" if foreign else "")
        raise ShapeError(
            f"{head}{why}; give static input shapes with --input or named dims with --dim (if "
            "every input shape is already static, their sizes depend on values only known at "
            "run time)")
    counted: dict[str, int] = {}  # element counts, for the TensorInfos below
    by_shape: dict[Shape, int] = {}  # most tensors share a few shapes
    for t in ordered:
        shape = shapes[t][1]
        elems = by_shape.get(shape, -1)
        if elems < 0:
            elems = 1
            for d in shape:
                elems *= d
            by_shape[shape] = elems
        counted[t] = elems
        if elems > MAX_ELEMS:
            raise GraphError(f"{name}: tensor {t!r} would have shape {list(shape)} "
                             f"({elems:.3g} elements, over the {MAX_ELEMS:.3g} limit); "
                             "check the model's attributes and the input shapes")
    deadline.check("shape inference")
    log.debug("%s: shapes from %s", name, engine)

    def control_cost(k: int) -> tuple[NodeCost, bool, str | None]:
        return control_flow_cost(proto.graph.node[kept[k]], proto, shapes, max_nodes, deadline,
                                 depth, known_trips, chosen, taken, producers,
                                 subgraph_flops=_subgraph_flops)

    (x, edge_index, edge_attr, edge_tensors, edge_shapes, unknown, weight_uses, weight_sizes,
     flops_by_dtype, control_notes) = node_arrays(name, rows, akeys, node_outs, shapes, counted,
                                                  const, derived, roots, deadline, control_cost)

    data_inputs = [(n, s) for n, s in inputs.items() if n not in weights]
    first_name, first = data_inputs[0] if data_inputs else ("", ())
    # an input holding one sample is a batch of 1, whatever its first dim
    batch_size = batch if batch is not None else (
        1 if not first or first_name in st.samples else first[0])
    params_unique = float(sum(e for e, _, _ in weight_sizes.values()))
    bytes_unique = float(sum(b for _, b, _ in weight_sizes.values()))
    u = graph_globals(x, edge_index, edge_attr, batch_size, params_unique, bytes_unique)
    meta, warnings = model_info(weights, weight_uses, weight_sizes, flops_by_dtype, rows, roots)
    meta["exporter"] = st.exporter
    if st.folded_bn is not None:  # PerfGraph node indices (perfseer_rt.graph.exporter.exporter_folds)
        meta["folded_batchnorm"] = [k for k, i in enumerate(kept) if i in st.folded_bn]
    if st.folded_pads:
        meta["folded_pads"] = [k for k, i in enumerate(kept) if i in st.folded_pads]
    meta["fixed_input_shapes"] = st.fixed_shapes
    meta["external_weight_share"] = st.external_share
    if st.exporter == TORCH_DYNAMO:
        warnings.append(DYNAMO_WARNING)
    if st.fixed_shapes and depth == 0:
        warnings.append(FIXED_SHAPES_WARNING)
    if st.external_share >= EXTERNAL_WEIGHTS_WARN_SHARE and depth == 0:
        warnings.append(EXTERNAL_WEIGHTS_WARNING.format(share=st.external_share))
    warnings += control_notes
    if completion is not None and completion.assumed:
        warnings.append(data_dependent.warning(op_counts(completion.assumed)))
    if completion is not None and completion.routed:
        warnings.append(data_dependent.routing_warning(completion.routed))
    if completion is not None and completion.guessed:
        counts = op_counts(completion.guessed)
        warnings.append(GUESSED_SHAPE_WARNING.format(
            nodes=sum(counts.values()), ops=", ".join(sorted(counts))))
    if unread:
        warnings.append(UNREAD_OUTPUT_WARNING.format(
            n=len(unread), names=", ".join(repr(t) for t in unread[:4]) + (" ..." if len(unread) > 4 else "")))
    warnings += [IMPLIED_DIM_WARNING.format(name=k, size=v, why=why)
                 for k, (v, why) in implied.items()]
    return PerfGraph(
        node_names=[r[1] or f"{r[0]}_{i}" for i, r in enumerate(rows)],
        node_ops=ops, x=x, edge_index=edge_index,
        edge_attr=edge_attr, edge_tensors=edge_tensors, edge_shapes=edge_shapes, u=u,
        unknown_ops=unknown, input_shapes=inputs, info=meta, warnings=warnings)


#: Most subgraph FLOPs kept between calls (emptied when full).
SUBGRAPH_CACHE_SIZE = 16384
#: (node cap, :func:`~perfseer_rt.graph.subgraphs.body_key`) -> the FLOPs of
#: a subgraph extracted as a model of its own (None: it could not be).
_SUBGRAPH_FLOPS: dict[tuple[Any, ...], float | None] = {}


def clear_subgraph_cache() -> None:
    """Empty the subgraph FLOPs kept between calls (speed only)."""
    _SUBGRAPH_FLOPS.clear()


def _subgraph_flops(body: onnx.GraphProto, actual: dict[str, TypedShape | None],
                    proto: onnx.ModelProto, shapes: dict[str, TypedShape], max_nodes: int,
                    deadline: Deadline, depth: int,
                    values: dict[str, np.ndarray | onnx.NodeProto] | None = None
                    ) -> float | None:
    """Total FLOPs of a subgraph extracted as a model of its own
    (:func:`subgraph_model`, ``values`` as there); None where it cannot be
    extracted. Kept per :func:`~perfseer_rt.graph.subgraphs.body_key`: a
    graph of thousands of Ifs whose branches have one structure extracts it
    once."""
    key = body_key(body, actual, proto, shapes, values)
    if key is not None:
        key = (max_nodes, key)
        if key in _SUBGRAPH_FLOPS:
            return _SUBGRAPH_FLOPS[key]
    flops = _extract_flops(body, actual, proto, shapes, max_nodes, deadline, depth, values)
    if key is not None:
        if len(_SUBGRAPH_FLOPS) >= SUBGRAPH_CACHE_SIZE:
            _SUBGRAPH_FLOPS.clear()
        _SUBGRAPH_FLOPS[key] = flops
    return flops


def _extract_flops(body: onnx.GraphProto, actual: dict[str, TypedShape | None],
                   proto: onnx.ModelProto, shapes: dict[str, TypedShape], max_nodes: int,
                   deadline: Deadline, depth: int,
                   values: dict[str, np.ndarray | onnx.NodeProto] | None) -> float | None:
    """:func:`_subgraph_flops` without the cache."""
    sub = subgraph_model(body, actual, proto, shapes, complete=False, values=values)
    assert sub is not None  # noqa: S101 - complete=False always builds one
    try:
        st = PreparedModel(sub, SUBGRAPH_NAME, max_nodes)
        if not st.kept:  # constants only (an If's empty branch): no work
            return 0.0
        return float(extract_shaped(st, None, None, None, deadline, depth + 1
                                    ).globals["flops_total"])
    except LimitError:
        raise
    except PerfSeerError:
        return None


def _unread_outputs(names: Iterable[str], proto: onnx.ModelProto, table: list[Row]) -> list[str]:
    """The tensors among ``names`` that are a node's optional output (not
    its first) and that no node, subgraph or graph output reads: an output
    whose shape nothing gives (a training output of an old
    BatchNormalization, say) then leaves the rest of the graph extractable."""
    optional = {o for row in table for o in row[OUTS][1:] if o}
    found = [t for t in names if t in optional]
    if not found:
        return []
    read = {i for row in table for i in row[INS]}
    read.update(vi.name for vi in proto.graph.output)
    for row in table:
        if has_subgraph(row):
            for a in row[OTHER]:
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    read.update(free_tensors(sub))
    return [t for t in found if t not in read]



def _not_onnx_ops(table: list[Row], proto: onnx.ModelProto) -> str:
    """Ops of the default domain that onnx has no schema for at the model's
    opset and onnxruntime has no kernel for (e.g. a TensorFlow op a converter
    left in), as "op (n nodes)", or ""."""
    opset = default_opset(proto)
    if opset is None:
        return ""
    counts: dict[str, int] = {}
    for row in table:
        op = row[0]
        if not row[DOMAIN] and op not in ONNX_DOMAIN_CONTRIB and schema_attributes(op, opset) is None:
            counts[op] = counts.get(op, 0) + 1
    return ", ".join(f"{op} ({n} node{'s' if n > 1 else ''})" for op, n in sorted(counts.items()))

