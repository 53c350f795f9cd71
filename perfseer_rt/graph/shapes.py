"""Shape inference with onnx on a *skeleton* of the model: every data input
at its resolved static shape (:mod:`perfseer_rt.graph.inputs`), large
initializers without their data, so models with 100 MB of embedded weights
infer as fast as structure-only ones (:func:`skeleton`, :func:`infer_shapes`,
with data propagation). Where onnx leaves a tensor unresolved, the small
constant tensors of folded shape subgraphs are computed
(:mod:`perfseer_rt.graph.const_eval`, bounded by
:data:`~perfseer_rt.graph.limits.MAX_CONST_ELEMS`) and inference runs
again, or node by node with the caller's documented rules. No other engine
runs: nothing is written to disk and nothing is imported beyond onnx.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from perfseer_rt.errors import GraphError, LimitError, PerfSeerError
from perfseer_rt.graph import sequences
from perfseer_rt.graph.const_eval import (
    constant_has_data,
    elems_of,
    evaluate_constants,
    fast_value,
    output_too_big,
    with_initializers,
    with_values,
)
from perfseer_rt.graph.inputs import graph_inputs
from perfseer_rt.graph.limits import (
    MAX_CONST_ELEMS,
    MAX_RANK,
    MAX_SHAPE_LEN,
    Deadline,
)
from perfseer_rt.graph.propagate import static_type

log = logging.getLogger(__name__)

#: Initializers at most this many elements keep their data in the skeleton
#: (shape data propagation needs the values of small int tensors).
SMALL_INITIALIZER = 64

Shape = tuple[int, ...]
TypedShape = tuple[int, Shape]  # (elem_type, shape)
def skeleton(model: onnx.ModelProto, inputs: dict[str, Shape]) -> onnx.ModelProto:
    """A copy of the model fit for fast shape inference.

    Large initializers become typed graph inputs (dims only, no data); small
    ones keep their values; graph inputs get the resolved static shapes;
    graph outputs keep only their names.
    """
    g = model.graph
    sk = onnx.ModelProto()
    sk.ir_version = model.ir_version
    sk.opset_import.extend(model.opset_import)
    sk.functions.extend(model.functions)
    sg = sk.graph
    sg.name = g.name
    sg.node.extend(g.node)
    for vi in graph_inputs(model):
        elem = vi.type.tensor_type.elem_type
        _add_value_info(sg.input, vi.name, elem, inputs[vi.name])
    small = sg.initializer
    for init in g.initializer:
        n = 1
        dims = init.dims
        for d in dims:
            n *= d
        if n <= SMALL_INITIALIZER and init.data_location != TensorProto.EXTERNAL:
            small.append(init)
        else:
            _add_value_info(sg.input, init.name, init.data_type, dims)
    for init in g.sparse_initializer:
        _add_value_info(sg.input, init.values.name, init.values.data_type, init.dims)
    for vo in g.output:  # untyped: a wrong declared type must not stop inference
        sg.output.append(onnx.ValueInfoProto(name=vo.name))
    return sk


def _add_value_info(container: Any, name: str, elem: int, dims: Iterable[int]) -> None:
    """Append a tensor ValueInfoProto with static ``dims`` to ``container``;
    the same message as ``onnx.helper.make_tensor_value_info`` builds, in a
    fraction of its time (it runs once per initializer)."""
    tt = container.add(name=name).type.tensor_type
    tt.elem_type = elem
    shape = tt.shape
    shape.SetInParent()  # a rank-0 tensor still has a (empty) shape
    add = shape.dim.add
    for d in dims:
        add(dim_value=d)


def _collect(model: onnx.ModelProto) -> dict[str, TypedShape]:
    """name -> (elem_type, static shape) for every fully static tensor."""
    out: dict[str, TypedShape] = {}
    g = model.graph
    for vis in (g.input, g.value_info, g.output):
        for vi in vis:
            tt = vi.type.tensor_type  # unset (another type): no shape either
            if not tt.HasField("shape"):
                continue
            dim = tt.shape.dim
            if len(dim) > MAX_RANK:
                raise GraphError(f"tensor {vi.name!r} would have {len(dim):,} dims (over "
                                 f"{MAX_RANK}); the model's shape computations are not plausible")
            dims = [d.dim_value for d in dim]
            if not dims or min(dims) > 0:  # the common case: no unset or 0 dim
                out[vi.name] = (tt.elem_type, tuple(dims))
                continue
            for d in dim:
                if not d.HasField("dim_value") or d.dim_value < 0:
                    break
            else:
                out[vi.name] = (tt.elem_type, tuple(dims))
    for init in g.initializer:
        out[init.name] = (init.data_type, tuple(init.dims[:]))
    return out


def _long_1d_input(sk: onnx.ModelProto) -> bool:
    """Whether a typed input of the skeleton (a graph input, or a large
    initializer whose data the skeleton leaves out) is 1-D and longer than
    MAX_SHAPE_LEN: onnx's data propagation treats 1-D tensors as shapes and
    allocates one dim per element (a 2^31-long bias feeding an Add took
    5 GB and 13 CPU-s, fuzz seed 1 case 3858)."""
    for vi in sk.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if len(dims) == 1 and dims[0].dim_value > MAX_SHAPE_LEN:
            return True
    return False


def _onnx_infer(sk: onnx.ModelProto, data_prop: bool = True) -> dict[str, TypedShape] | None:
    try:
        return _collect(onnx.shape_inference.infer_shapes(
            sk, check_type=False, strict_mode=False,
            data_prop=data_prop and not _long_1d_input(sk)))
    except PerfSeerError:
        raise  # an implausible model (_collect): the same for every round
    except Exception as exc:  # noqa: BLE001 - any failure leaves shapes to the next round
        log.debug("onnx shape inference failed: %s", exc)
        return None


def infer_shapes(sk: onnx.ModelProto, needed: set[str], folded: Sequence[onnx.NodeProto] = (),
                 deadline: Deadline | None = None, model: onnx.ModelProto | None = None,
                 data_prop: bool = True, fill: Fill | None = None
                 ) -> tuple[dict[str, TypedShape], str]:
    """Infer static shapes; returns them and which engine produced them.

    ``needed`` are the tensors the caller must have shapes for. When onnx's
    inference (with data propagation) leaves some unresolved, the values of
    the ``folded`` (constant) nodes are computed (:func:`evaluate_constants`)
    and injected as initializers, and inference runs again, at most 16 rounds.
    ``model`` (the original) lends the data of its initializers of at most
    MAX_CONST_ELEMS elements (e.g. a 512-long position-id buffer that a
    folded Slice cuts by the sequence length). ``data_prop=False`` turns
    onnx's data propagation off (the constant evaluation still runs): once
    data-dependent sizes are bounded, it would propagate index tensors of
    hundreds of thousands of elements dim by dim (RetinaNet: 4.7 CPU-s
    with it, 0.5 without, every shape the same). ``fill`` types the outputs
    that onnx's inference of a node leaves open in the one-pass completion
    (:func:`_complete_per_node`; the caller's documented rules).
    """
    shapes = _onnx_infer(sk, data_prop) or _collect(sk)
    engine = "onnx"
    values: dict[str, np.ndarray] = {}
    if model is not None and needed - shapes.keys() and folded:
        values.update(_small_initializers(model, sk))
    if needed - shapes.keys() and (folded or fill is not None):
        done = _complete_per_node(sk, folded, shapes, values, deadline, fill)
        if done is not None:
            if not needed - done[0].keys():
                return done[0], "onnx+constant-evaluation"
            if done[1]:  # ``fill`` typed some outputs: the rounds go on from there
                shapes = done[0]
    for _ in range(16):
        if not needed - shapes.keys() or not folded:
            break
        if deadline is not None:
            deadline.check("shape inference")
        new = evaluate_constants(sk, folded, shapes, values)
        if not new:
            break
        values.update(new)
        again = _onnx_infer(with_values(sk, values), data_prop)
        if again is None:
            break
        shapes.update(again)
        engine = "onnx+constant-evaluation"
    return shapes, engine


_SCHEMAS: dict[tuple[str, str, int], object] = {}


def _schema(op: str, domain: str, version: int) -> Any:
    """onnx's schema of a standard op at an opset (cached; None if unknown)."""
    key = (op, domain, version)
    if key not in _SCHEMAS:
        try:
            _SCHEMAS[key] = onnx.defs.get_schema(op, version, domain)
        except Exception:  # noqa: BLE001 - SchemaError: not a standard op
            _SCHEMAS[key] = None
    return _SCHEMAS[key]


def _complete_per_node(sk: onnx.ModelProto, folded: Sequence[onnx.NodeProto],
                       shapes: dict[str, TypedShape], known: dict[str, np.ndarray],
                       deadline: Deadline | None, fill: Fill | None = None
                       ) -> tuple[dict[str, TypedShape], bool] | None:
    """Shapes that whole-graph inference left open, in one topological pass.

    Folded nodes get their values (:func:`fast_value`, ``Shape``/``Size``
    from inferred shapes, else onnx's reference evaluator on that node);
    every node with an output still unshaped runs onnx's own inference of
    that one node (``infer_node_outputs``) with its inputs' shapes and the
    constant values among them. This replaces rounds of whole-graph
    inference (one per level of shape dependency) by one pass. A computed
    value's tensor takes the value's type and shape, as when values are
    injected as initializers. Outputs still open on a standard op (control
    flow included) are given to ``fill`` with the shapes and values so far.
    Returns the completed shapes and whether ``fill`` typed any output, or
    None (the caller falls back to rounds) on any failure.
    """
    from onnx.reference import ReferenceEvaluator  # lazy: only models that need it

    shapes = dict(shapes)
    avail = with_initializers(sk, known)
    folded_outs = {o for n in folded for o in n.output if o}
    opsets = {(imp.domain or ""): imp.version for imp in sk.opset_import}
    opset_list = list(sk.opset_import)
    computed: dict[str, np.ndarray] = {}
    filled = False
    # sequence values: onnx types them without a length, and its inference of
    # a reader given a tensor in their place fails; ``fill`` shapes them
    seqs = {o for n in sk.graph.node if n.op_type in sequences.PRODUCERS for o in n.output}
    try:
        for k, node in enumerate(sk.graph.node):
            if deadline is not None and not k % 512:
                deadline.check("shape inference")
            outs = [o for o in node.output if o]
            if not outs:
                continue
            op = node.op_type
            if outs[0] in folded_outs and not all(o in avail for o in outs):
                vals = None
                if op in ("Shape", "Size") and node.domain in ("", "ai.onnx"):
                    if node.input and node.input[0] in shapes:
                        dims = np.array(shapes[node.input[0]][1], dtype=np.int64)
                        if op == "Size":
                            vals = (np.array(int(np.prod(dims)), dtype=np.int64),)
                        else:
                            attrs = {a.name: a.i for a in node.attribute}
                            vals = (dims[attrs.get("start", 0):attrs.get("end")],)
                elif not (op == "Constant" and not constant_has_data(node)) \
                        and op not in sequences.PRODUCERS:  # a list is not an array
                    vals = fast_value(node, avail)
                    if vals is None and all(i == "" or i in avail for i in node.input) \
                            and not output_too_big(node, avail):
                        inputs = [i for i in dict.fromkeys(node.input) if i]
                        graph = helper.make_graph(
                            [node], "constant", [], [onnx.ValueInfoProto(name=o) for o in outs],
                            initializer=[numpy_helper.from_array(np.asarray(avail[i]), i)
                                         for i in inputs])
                        try:
                            vals = tuple(ReferenceEvaluator(helper.make_model(
                                graph, opset_imports=opset_list)).run(None, {}))
                        except Exception:  # noqa: BLE001 - this value stays unknown
                            vals = None
                if vals is not None and len(vals) == len(outs):
                    for o, v in zip(outs, vals):
                        v = np.asarray(v)
                        if v.size <= MAX_CONST_ELEMS:
                            avail[o] = computed[o] = v
                            shapes[o] = (helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            missing = [o for o in outs if o not in shapes and o not in computed]
            if not missing:
                continue
            if op in sequences.PRODUCERS or any(i in seqs for i in node.input) \
                    or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                           for a in node.attribute):
                filled |= _fill(fill, node, shapes, avail, missing)  # the caller's rules
                continue
            domain = "" if node.domain == "ai.onnx" else node.domain
            schema = _schema(op, domain, opsets.get(domain, 0)) if domain in opsets else None
            if schema is None:
                continue  # custom op: left to the caller's rules
            types, data = {}, {}
            for i in node.input:
                if not i:
                    continue
                typed = shapes.get(i)
                if typed is None:
                    break
                types[i] = helper.make_tensor_type_proto(typed[0], list(typed[1]))
                if i in avail:
                    data[i] = numpy_helper.from_array(np.asarray(avail[i]), i)
            else:
                try:
                    res = onnx.shape_inference.infer_node_outputs(
                        schema, node, types, data, opset_imports=opset_list,
                        ir_version=sk.ir_version)
                except onnx.shape_inference.InferenceError:
                    res = {}  # inconsistent shapes (a size bounded upstream): ``fill`` decides
                for o in missing:
                    typed = static_type(res[o]) if o in res else None
                    if typed is not None:
                        shapes[o] = typed
                if any(o not in shapes for o in missing):
                    filled |= _fill(fill, node, shapes, avail, missing)
    except LimitError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure: the caller's rounds decide
        log.debug("per-node shape completion failed: %s", exc)
        return None
    return shapes, filled


#: Types the outputs of a node that onnx's inference leaves open (None per
#: output or for all: no rule); see :func:`infer_shapes`.
Fill = Callable[[onnx.NodeProto, dict[str, TypedShape], dict[str, np.ndarray]],
                Sequence[TypedShape | None] | None]


def _fill(fill: Fill | None, node: onnx.NodeProto, shapes: dict[str, TypedShape],
          values: dict[str, np.ndarray], missing: list[str]) -> bool:
    """Shapes of ``missing`` outputs of ``node`` from ``fill``, where it has
    them; whether it gave any."""
    if fill is None:
        return False
    typed = fill(node, shapes, values)
    gave = False
    for o, t in zip(node.output, typed or ()):
        if t is not None and o in missing and o not in shapes:
            shapes[o] = t
            gave = True
    return gave


def _small_initializers(model: onnx.ModelProto, sk: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Data of the model's initializers that the skeleton left out but that
    are small enough to compute with (at most MAX_CONST_ELEMS elements)."""
    have = {t.name for t in sk.graph.initializer}
    out = {}
    for t in model.graph.initializer:
        if t.name in have or t.data_location == TensorProto.EXTERNAL:
            continue
        if elems_of(t.dims) > MAX_CONST_ELEMS or t.data_type not in (6, 7, 1, 9):
            continue
        try:
            out[t.name] = numpy_helper.to_array(t)
        except Exception:  # noqa: BLE001 - undecodable data: not a usable constant
            continue
    return out


def refusal(model: onnx.ModelProto, shapes: dict[str, TypedShape]) -> str | None:
    """Why the shapes stop, where onnx's inference of one node refuses its
    inputs' known shapes (incompatible dims: a file onnxruntime refuses too),
    as "node 'name' (Op): message", or None. The first such node in graph
    order; only called to explain a failure."""
    opsets = {(imp.domain or ""): imp.version for imp in model.opset_import}
    opset_list = list(model.opset_import)
    for node in model.graph.node:
        outs = [o for o in node.output if o]
        ins = [i for i in node.input if i]
        if not outs or all(o in shapes for o in outs) or any(i not in shapes for i in ins) \
                or node.op_type in sequences.PRODUCERS or node.op_type in sequences.READERS \
                or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                       for a in node.attribute):
            continue  # lists are carried as tensors here, bodies shaped apart: no verdict
        domain = "" if node.domain == "ai.onnx" else node.domain
        schema = _schema(node.op_type, domain, opsets.get(domain, 0)) if domain in opsets else None
        if schema is None:
            continue
        types = {i: helper.make_tensor_type_proto(shapes[i][0], list(shapes[i][1])) for i in ins}
        try:
            onnx.shape_inference.infer_node_outputs(schema, node, types, {},
                                                    opset_imports=opset_list,
                                                    ir_version=model.ir_version)
        except onnx.shape_inference.InferenceError as exc:
            shown = ", ".join(f"{list(shapes[i][1])}" for i in ins)
            why = str(exc).split("] ", 1)[-1]
            return f"node {node.name or outs[0]!r} ({node.op_type}) refuses inputs of shapes {shown}: {why}"
        except Exception:  # noqa: BLE001 - no explanation from this node
            continue
    return None
