"""Control-flow subgraphs (If branches, Loop and Scan bodies) as models of
their own, and the values extraction reads from a graph before run time
(an If's condition, a Loop's trip count, a scalar constant).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

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


def constant_of(proto: onnx.ModelProto, name: str) -> np.ndarray | None:
    """The value of an initializer or Constant node of the graph (None:
    neither, or data not in the file)."""
    found = [t for t in proto.graph.initializer if t.name == name]
    found += [a.t for n in proto.graph.node if n.op_type == "Constant" and name in n.output
              for a in n.attribute if a.type == onnx.AttributeProto.TENSOR]
    return tensor_value(found[0]) if found else None


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
    constants = _outer_constants(proto.graph, set(outer))
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


def _outer_constants(graph: onnx.GraphProto, names: set[str]
                     ) -> dict[str, onnx.NodeProto | onnx.TensorProto]:
    """The tensors among ``names`` that ``graph`` defines by value: its
    Constant nodes and initializers of at most MAX_CONST_ELEMS elements with
    data in the file (a subgraph that reads them, e.g. the axes of a Slice,
    can then be shaped)."""
    found: dict[str, onnx.NodeProto | onnx.TensorProto] = {}
    if not names:
        return found
    for t in graph.initializer:
        if t.name in names and t.data_location != onnx.TensorProto.EXTERNAL \
                and math.prod(t.dims) <= MAX_CONST_ELEMS and stored_bytes(t):
            found[t.name] = t
    for n in graph.node:
        if n.op_type == "Constant" and not n.domain and len(n.output) == 1 \
                and n.output[0] in names:
            found[n.output[0]] = n
    return found
