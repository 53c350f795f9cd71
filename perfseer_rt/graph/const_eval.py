"""Values of small constant tensors of folded shape subgraphs
(:func:`evaluate_constants`): computed node by node with onnx's reference
evaluator (plain numpy for the common ops), bounded by
:data:`~perfseer_rt.graph.limits.MAX_CONST_ELEMS`, for the rounds of
:func:`perfseer_rt.graph.shapes.infer_shapes` where onnx's inference left
a tensor unresolved.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from perfseer_rt.graph.limits import MAX_CONST_ELEMS
from perfseer_rt.graph.propagate import TypedShape

log = logging.getLogger(__name__)


def with_initializers(sk: onnx.ModelProto, known: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``known`` constants plus every decodable initializer of ``sk`` not among them."""
    avail: dict[str, np.ndarray] = dict(known)
    for init in sk.graph.initializer:
        if init.name not in avail:
            try:
                avail[init.name] = numpy_helper.to_array(init)
            except Exception:  # noqa: BLE001 - undecodable data: not a usable constant
                continue
    return avail


def elems_of(shape: Iterable[Any]) -> int:
    n = 1
    for d in shape:
        n *= max(int(d), 0)
    return n


#: Folded ops whose output size is set by their inputs' values.
_SIZED_BY_VALUE = frozenset({"ConstantOfShape", "Expand", "Tile", "Range"})


def output_too_big(node: onnx.NodeProto, avail: dict[str, np.ndarray]) -> bool:
    """Whether a folded node would materialise more than MAX_CONST_ELEMS
    elements (ConstantOfShape/Expand/Tile/Range sized by their inputs)."""
    try:
        if any(i in avail and np.asarray(avail[i]).size > MAX_CONST_ELEMS for i in node.input):
            return True
        op = node.op_type
        if op == "ConstantOfShape":
            return elems_of(np.asarray(avail[node.input[0]]).ravel()) > MAX_CONST_ELEMS
        if op == "Expand":
            x = np.asarray(avail[node.input[0]])
            want = np.asarray(avail[node.input[1]]).ravel()
            r = max(x.ndim, len(want))
            xs = (1,) * (r - x.ndim) + x.shape
            ws = (1,) * (r - len(want)) + tuple(int(v) for v in want)
            return elems_of(max(a, b) for a, b in zip(xs, ws)) > MAX_CONST_ELEMS
        if op == "Tile":
            x = np.asarray(avail[node.input[0]])
            reps = np.asarray(avail[node.input[1]]).ravel()
            return x.size * elems_of(reps) > MAX_CONST_ELEMS
        if op == "Range":
            start, limit, delta = (float(np.asarray(avail[i]).ravel()[0]) for i in node.input[:3])
            if delta == 0 or not np.isfinite([start, limit, delta]).all():
                return True
            return (limit - start) / delta > MAX_CONST_ELEMS
    except (KeyError, IndexError, ValueError, TypeError, OverflowError):
        return True
    return False


def evaluate_constants(sk: onnx.ModelProto, folded: Sequence[onnx.NodeProto],
                       shapes: dict[str, TypedShape], known: dict[str, np.ndarray]
                       ) -> dict[str, np.ndarray]:
    """Values of the folded nodes that can be computed now.

    ``Shape``/``Size`` take their input's inferred shape; other folded nodes
    run in onnx's reference evaluator when all their inputs have values
    (initializers with data, or earlier results) and no input or output is
    larger than MAX_CONST_ELEMS. Nodes that need weights without data, or
    shapes not yet inferred, wait for a later round.
    """
    from onnx.reference import ReferenceEvaluator  # lazy: only models that need it

    avail = with_initializers(sk, known)
    new: dict[str, np.ndarray] = {}
    pending: list[onnx.NodeProto] = []
    ready = set(avail)
    for node in folded:
        outs = [o for o in node.output if o]
        if all(o in avail for o in outs):
            continue
        if node.op_type in ("Shape", "Size"):
            if node.input and node.input[0] in shapes:
                dims = np.array(shapes[node.input[0]][1], dtype=np.int64)
                if node.op_type == "Size":
                    val = np.array(int(np.prod(dims)), dtype=np.int64)
                else:
                    attrs = {a.name: a.i for a in node.attribute}
                    val = dims[attrs.get("start", 0):attrs.get("end")]
                if outs:
                    avail[outs[0]] = new[outs[0]] = val
                    ready.add(outs[0])  # its consumers can run in this round
            continue
        if node.op_type == "Constant" and not constant_has_data(node):
            continue  # a structure-only export stripped its value
        fast = fast_value(node, avail)
        if fast is not None and len(fast) == len(outs):
            for o, v in zip(outs, fast):
                avail[o] = new[o] = v
            ready.update(outs)
            continue
        if node.op_type in _SIZED_BY_VALUE:  # its size needs its inputs' values now
            ok = all(i == "" or i in avail for i in node.input) and not output_too_big(node, avail)
        else:
            ok = all(i == "" or i in ready for i in node.input) and not output_too_big(
                node, {i: avail[i] for i in node.input if i in avail})
        if ok:
            pending.append(node)
            ready.update(outs)
    if pending:
        inputs = sorted({i for n in pending for i in n.input if i and i in avail})
        graph = helper.make_graph(
            pending, "constants", [],
            [onnx.ValueInfoProto(name=o) for n in pending for o in n.output if o],
            initializer=[numpy_helper.from_array(np.asarray(avail[i]), i) for i in inputs])
        model = helper.make_model(graph, opset_imports=list(sk.opset_import))
        results: list[Any]
        try:
            results = list(ReferenceEvaluator(model).run(None, {}))
            names = [o for n in pending for o in n.output if o]
        except Exception as exc:  # noqa: BLE001 - some op failed: go node by node
            log.debug("constant evaluation failed: %s", exc)
            names, results = _one_by_one(pending, avail, sk.opset_import)
        new.update({n: np.asarray(v) for n, v in zip(names, results)
                    if np.asarray(v).size <= MAX_CONST_ELEMS})
    return new


_AT = onnx.AttributeProto
#: Numeric tensor types whose ``numpy_helper.to_array`` is plain numpy.
_PLAIN_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13})


def fast_value(node: onnx.NodeProto, avail: dict[str, np.ndarray]) -> tuple[np.ndarray] | None:
    """The outputs of the commonest shape-subgraph ops (Constant, Identity,
    Gather, Unsqueeze, Concat), computed with the same numpy calls as onnx's
    reference evaluator but without building one; None where the node is
    not one of these simple cases (it then goes to the reference evaluator),
    or where a value would exceed MAX_CONST_ELEMS."""
    op = node.op_type
    if node.domain not in ("", "ai.onnx"):
        return None
    ins = node.input
    try:
        if op == "Constant":
            if len(node.attribute) != 1:
                return None
            a = node.attribute[0]
            if a.name == "value" and a.type == _AT.TENSOR and a.t.data_type in _PLAIN_TYPES \
                    and a.t.data_location != TensorProto.EXTERNAL:
                val = numpy_helper.to_array(a.t)
            elif a.name == "value_int" and a.type == _AT.INT:
                val = np.array(a.i, dtype=np.int64)
            elif a.name == "value_ints" and a.type == _AT.INTS:
                val = np.array(list(a.ints), dtype=np.int64)
            else:
                return None
        else:
            if not ins or any(not i or i not in avail for i in ins):
                return None
            args = [avail[i] for i in ins]
            if any(not isinstance(v, np.ndarray) or v.size > MAX_CONST_ELEMS for v in args):
                return None
            if op == "Identity" and len(args) == 1:
                val = args[0].copy()
            elif op == "Gather" and len(args) == 2 and all(v.flags["C_CONTIGUOUS"] for v in args):
                axis = 0
                for a in node.attribute:
                    if a.name == "axis" and a.type == _AT.INT:
                        axis = a.i
                    else:
                        return None
                val = np.take(args[0], args[1], axis=axis)
            elif op == "Unsqueeze" and len(args) == 2 and not node.attribute \
                    and args[1].ndim == 1 and args[1].size:
                val = np.expand_dims(args[0], axis=tuple(args[1]))
            elif op == "Concat" and len(node.attribute) == 1 and node.attribute[0].name == "axis" \
                    and node.attribute[0].type == _AT.INT:
                axis = node.attribute[0].i
                if not all(0 <= axis < v.ndim for v in args):
                    return None
                val = np.concatenate(args, axis=axis)
            else:
                return None
    except Exception:  # noqa: BLE001 - anything unusual: the reference evaluator decides
        return None
    if val.size > MAX_CONST_ELEMS:
        return None
    return (val,)


def constant_has_data(node: onnx.NodeProto) -> bool:
    for a in node.attribute:
        if a.type == onnx.AttributeProto.TENSOR:
            return bool(a.t.data_location != TensorProto.EXTERNAL)
    return True


def _one_by_one(pending: Sequence[onnx.NodeProto], avail: dict[str, np.ndarray],
                opsets: Iterable[onnx.OperatorSetIdProto]) -> tuple[list[str], list[Any]]:
    """Evaluate ``pending`` node by node, skipping those that fail and the
    nodes that need their outputs."""
    from onnx.reference import ReferenceEvaluator  # lazy: only models that need it

    vals = dict(avail)
    names, outs = [], []
    for node in pending:
        if not all(i == "" or i in vals for i in node.input):
            continue
        inputs = [i for i in dict.fromkeys(node.input) if i]
        graph = helper.make_graph(
            [node], "constant", [], [onnx.ValueInfoProto(name=o) for o in node.output if o],
            initializer=[numpy_helper.from_array(np.asarray(vals[i]), i) for i in inputs])
        try:
            res = ReferenceEvaluator(helper.make_model(graph, opset_imports=list(opsets))
                                     ).run(None, {})
        except Exception:  # noqa: BLE001 - this node stays unresolved
            continue
        for o, v in zip([o for o in node.output if o], res):
            vals[o] = v
            names.append(o)
            outs.append(v)
    return names, outs


def with_values(sk: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The skeleton with computed constants as initializers and their
    producing nodes removed."""
    out = onnx.ModelProto()
    out.CopyFrom(sk)
    keep = [n for n in out.graph.node if not all(o in values for o in n.output if o)]
    del out.graph.node[:]
    out.graph.node.extend(keep)
    have = {t.name for t in out.graph.initializer}
    for k, v in values.items():
        if k not in have:
            try:
                out.graph.initializer.append(numpy_helper.from_array(np.asarray(v), k))
            except Exception:  # noqa: BLE001 - a value onnx cannot store stays unknown
                continue
    return out
