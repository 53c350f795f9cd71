"""Control-flow subgraphs (If branches, Loop and Scan bodies) as models of
their own, and the values extraction reads from a graph before run time
(an If's condition, a Loop's trip count, a scalar constant).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from perfseer_rt.graph.inputs import WEIGHT_SUFFIXES
from perfseer_rt.graph.limits import MAX_CONST_ELEMS
from perfseer_rt.graph.propagate import TypedShape, tensor_value
from perfseer_rt.graph.validate import stored_bytes

#: The control-flow ops (their cost and shapes come from their subgraphs).
CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
#: Deepest nesting of control-flow subgraphs that is costed.
MAX_SUBGRAPH_DEPTH = 8


def if_condition(name: str, values: dict[str, np.ndarray]) -> bool | None:
    """An If's condition where its value was computed before run time
    (None: not known)."""
    v = values.get(name) if name else None
    if v is None or v.size != 1 or v.dtype.kind not in "biu":
        return None
    return bool(v.ravel()[0])


def tensor_ints(name: str, values: dict[str, np.ndarray], proto: onnx.ModelProto
                ) -> list[int] | None:
    """The integer values of a tensor (at most 2^16 of them) computed so far
    or held by an initializer or Constant (None: unknown or absent)."""
    if not name:
        return None
    v = values.get(name)
    if v is None:
        v = constant_of(proto, name)
    if v is None or v.dtype.kind not in "iu" or v.size > MAX_CONST_ELEMS:
        return None
    return [int(x) for x in np.asarray(v).ravel()]


class _Constants(NamedTuple):
    """The tensors a model's graph defines by value, by name."""

    #: the first initializer of each name, else the first TENSOR attribute
    #: of the first Constant node writing it (:func:`constant_of`)
    tensors: dict[str, onnx.TensorProto]
    #: the last Constant node (one output, default domain) writing each name,
    #: else the last initializer of at most MAX_CONST_ELEMS elements with
    #: data in the file (:func:`_outer_constants`)
    by_value: dict[str, onnx.NodeProto | onnx.TensorProto]


#: Each model's :class:`_Constants` in use (by ``id``, beside the model,
#: which keeps the id its own); read once per model instead of once per
#: control-flow node, and emptied when an extraction ends
#: (:func:`clear_constants`).
_CONSTANTS: dict[int, tuple[onnx.ModelProto, _Constants]] = {}
#: Most models indexed at once (emptied when full).
_CONSTANTS_KEPT = 64


def _constants(proto: onnx.ModelProto) -> _Constants:
    """``proto``'s :class:`_Constants`, read on first use."""
    entry = _CONSTANTS.get(id(proto))
    if entry is not None and entry[0] is proto:
        return entry[1]
    g = proto.graph
    tensors: dict[str, onnx.TensorProto] = {}
    by_value: dict[str, onnx.NodeProto | onnx.TensorProto] = {}
    for t in g.initializer:
        tensors.setdefault(t.name, t)
        if t.data_location != onnx.TensorProto.EXTERNAL and math.prod(t.dims) <= MAX_CONST_ELEMS \
                and stored_bytes(t):
            by_value[t.name] = t
    made: dict[str, onnx.TensorProto] = {}
    for n in g.node:
        if n.op_type == "Constant":
            held = [a.t for a in n.attribute if a.type == onnx.AttributeProto.TENSOR]
            if held:
                for o in n.output:
                    made.setdefault(o, held[0])
            if not n.domain and len(n.output) == 1:
                by_value[n.output[0]] = n
    for name, value in made.items():
        tensors.setdefault(name, value)
    if len(_CONSTANTS) >= _CONSTANTS_KEPT:
        _CONSTANTS.clear()
    found = _CONSTANTS[id(proto)] = (proto, _Constants(tensors, by_value))
    return found[1]


def clear_constants() -> None:
    """Forget the models indexed by :func:`_constants` (the end of an
    extraction: no model outlives it here)."""
    _CONSTANTS.clear()


def constant_of(proto: onnx.ModelProto, name: str) -> np.ndarray | None:
    """The value of an initializer or Constant node of the graph (None:
    neither, or data not in the file)."""
    found = _constants(proto).tensors.get(name)
    return tensor_value(found) if found is not None else None


def const_int(proto: onnx.ModelProto, name: str) -> int | None:
    """The value (0..2^31) of a scalar integer initializer or Constant, if it has one."""
    found = tensor_ints(name, {}, proto)
    return found[0] if found and len(found) == 1 and 0 <= found[0] <= 2**31 else None


def loop_body_values(body: onnx.GraphProto, node: onnx.NodeProto,
                      producers: dict[str, onnx.NodeProto], trips: int | None
                      ) -> dict[str, np.ndarray | onnx.NodeProto]:
    """What a Loop body's formal inputs are known to hold (for
    :func:`subgraph_model`): the iteration number 0 in a loop of one
    iteration (torch's exporter writes them), and a list carried in empty
    (made by SequenceEmpty) as that node, as a tensor input of a 0 dim
    cannot stand for it."""
    given: dict[str, np.ndarray | onnx.NodeProto] = {}
    formal = [vi.name for vi in body.input]
    counter = body.input[0].type.tensor_type.shape.dim if body.input else []
    if trips == 1 and formal and all(d.HasField("dim_value") and d.dim_value == 1
                                     for d in counter):
        given[formal[0]] = np.zeros([1] * len(counter), dtype=np.int64)  # scalar or [1]
    for f, a in zip(formal[2:], node.input[2:]):
        made = producers.get(a) if a else None
        if made is not None and made.op_type == "SequenceEmpty":
            empty = onnx.NodeProto()
            empty.CopyFrom(made)
            del empty.output[:]
            empty.output.append(f)
            given[f] = empty
    return given


def subgraph_model(body: onnx.GraphProto, actual: dict[str, TypedShape | None],
                    proto: onnx.ModelProto, shapes: dict[str, TypedShape],
                    complete: bool = True,
                    values: dict[str, np.ndarray | onnx.NodeProto] | None = None
                    ) -> onnx.ModelProto | None:
    """A subgraph as a model of its own: formal inputs take ``actual``
    shapes (or their declared static ones), or are initializers (nodes)
    where ``values`` holds their values (the nodes defining them); tensors
    of the outer scope come in as inputs with their outer shapes. With
    ``complete``, None while a tensor it reads from the outer scope has no
    shape yet."""
    g = onnx.GraphProto()
    g.CopyFrom(body)
    outer = []
    for t in free_tensors(g):
        if t in shapes:
            outer.append(t)
        elif complete:
            return None
    del g.input[:]
    for vi in body.input:
        typed = actual.get(vi.name) if actual else None
        value = values.get(vi.name) if values else None
        if isinstance(value, onnx.NodeProto):
            g.node.insert(0, value)
        elif value is not None:
            g.initializer.append(numpy_helper.from_array(value, vi.name))
        elif typed is not None:
            g.input.append(helper.make_tensor_value_info(vi.name, typed[0], list(typed[1])))
        else:
            g.input.append(vi)
    constants = _outer_constants(proto, set(outer))
    for t in outer:
        if t in constants:  # a Constant node or a small initializer: its value
            value = constants[t]
            if isinstance(value, onnx.NodeProto):
                g.node.insert(0, value)
            else:
                g.initializer.append(value)
            continue
        elem, shape = shapes[t]
        g.input.append(helper.make_tensor_value_info(t, elem, list(shape)))
    sub = onnx.ModelProto(ir_version=proto.ir_version, graph=g)
    sub.opset_import.extend(proto.opset_import)
    return sub


def free_tensors(graph: onnx.GraphProto) -> list[str]:
    """The tensors ``graph`` reads from its enclosing scopes, in first-use
    order: read by its nodes or by the subgraphs nested in them, defined by
    none of its inputs, initializers or nodes (nor by the nested graph that
    reads them)."""
    defined = ({vi.name for vi in graph.input} | {t.name for t in graph.initializer}
               | {o for n in graph.node for o in n.output})
    free: dict[str, None] = {}
    for n in graph.node:
        reads = list(n.input)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                reads += free_tensors(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    reads += free_tensors(sub)
        free.update((t, None) for t in reads if t and t not in defined)
    return list(free)


def _outer_constants(proto: onnx.ModelProto, names: set[str]
                     ) -> dict[str, onnx.NodeProto | onnx.TensorProto]:
    """The tensors among ``names`` that ``proto``'s graph defines by value:
    its Constant nodes and initializers of at most MAX_CONST_ELEMS elements
    with data in the file (a subgraph that reads them, e.g. the axes of a
    Slice, can then be shaped)."""
    if not names:
        return {}
    by_value = _constants(proto).by_value
    return {t: by_value[t] for t in names if t in by_value}


class _NoKey(Exception):
    """A subgraph :func:`body_key` makes no key for."""


def body_key(body: onnx.GraphProto, actual: dict[str, TypedShape | None],
             proto: onnx.ModelProto, shapes: dict[str, TypedShape],
             values: dict[str, np.ndarray | onnx.NodeProto] | None = None
             ) -> tuple[Any, ...] | None:
    """A key of the model :func:`subgraph_model` builds of ``body`` (with
    ``complete=False``) that leaves out the tensors' names: two bodies get
    one key when their models are the same up to a renaming of tensors
    (formal inputs, nodes, attributes, declared types, initializers; the
    outer tensors they read at the same positions with the same types or
    constant values). Tensor names count only where extraction reads them:
    whether they are text and whether they end like a parameter's
    (:data:`perfseer_rt.graph.inputs.WEIGHT_SUFFIXES`). None (no key) for a
    body holding subgraphs of its own (they may read the body's tensors by
    name) or sparse initializers. The chains of Ifs whose branches repeat a
    layer's structure then cost each distinct branch once."""
    if len(body.sparse_initializer):
        return None
    ids: dict[str, tuple[int, bool]] = {"": (-1, False)}

    def cid(name: str) -> tuple[int, bool]:
        found = ids.get(name)
        if found is None:
            if type(name) is not str:  # not UTF-8 (protobuf hands it back as bytes)
                raise _NoKey
            found = ids[name] = (len(ids), name.endswith(WEIGHT_SUFFIXES))
        return found

    try:
        parts: list[Any] = [proto.ir_version, tuple((i.domain, i.version) for i in proto.opset_import)]
        for vi in body.input:
            typed = actual.get(vi.name) if actual else None
            value = values.get(vi.name) if values else None
            if isinstance(value, onnx.NodeProto):
                given: Any = ("node", value.op_type, value.domain, tuple(map(cid, value.input)),
                              _attribute_bytes(value))
            elif value is not None:
                given = ("array", value.dtype.str, value.shape, value.tobytes())
            else:
                given = typed if typed is not None else vi.type.SerializeToString()
            parts.append((cid(vi.name), given))
        for init in body.initializer:
            parts.append((cid(init.name), _unnamed(init)))
        for n in body.node:
            parts.append((n.op_type, n.domain, tuple(map(cid, n.input)), tuple(map(cid, n.output)),
                          _attribute_bytes(n), type(n.name) is str))
        for vis in (body.output, body.value_info):
            parts.append(tuple((cid(vi.name), vi.type.SerializeToString()) for vi in vis))
        constants = _constants(proto).by_value
        for name in free_tensors(body):
            typed = shapes.get(name)
            value = constants.get(name) if typed is not None else None
            if isinstance(value, onnx.NodeProto):
                parts.append(("node", value.op_type, _attribute_bytes(value)))
            elif value is not None:
                parts.append(("tensor", _unnamed(value)))
            else:
                parts.append(typed)
    except _NoKey:
        return None
    return tuple(parts)


def _attribute_bytes(node: onnx.NodeProto) -> bytes:
    """A node's attributes serialized (_NoKey where one holds a subgraph)."""
    out = []
    for a in node.attribute:
        if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            raise _NoKey
        out.append(a.SerializeToString())
    return b"".join(out)


def _unnamed(t: onnx.TensorProto) -> bytes:
    """A tensor serialized without its name."""
    c = onnx.TensorProto()
    c.CopyFrom(t)
    c.name = ""
    return bytes(c.SerializeToString())

