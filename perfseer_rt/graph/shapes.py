"""Static shapes of every tensor: input resolution and shape inference.

Dynamic input dims are resolved from the caller's batch size and explicit
input shapes; then onnx's shape inference (with data propagation) runs on a
*skeleton* of the model whose large initializers carry no data, so models
with 100 MB of embedded weights infer as fast as structure-only ones. When
onnx leaves a tensor without a static shape, onnxruntime's symbolic shape
inference is tried as a fallback.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, helper

from perfseer_rt.errors import ShapeError

log = logging.getLogger(__name__)

#: Initializers at most this many elements keep their data in the skeleton
#: (shape data propagation needs the values of small int tensors).
SMALL_INITIALIZER = 64

Shape = tuple[int, ...]
TypedShape = tuple[int, Shape]  # (elem_type, shape)


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The real inputs of the graph (initializers listed as inputs excluded)."""
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def resolve_inputs(model: onnx.ModelProto, batch: int | None,
                   input_shapes: dict[str, Shape] | None) -> dict[str, Shape]:
    """A static shape for every graph input.

    Rules: an explicitly given shape wins (its rank must match); otherwise a
    dynamic first dim takes ``batch`` (1 when no batch is given); a static
    first dim that differs from ``batch`` is an error; any other dynamic dim
    is an error naming the input and dim.

    Raises:
        ShapeError: unknown input name, rank mismatch, batch conflict or an
            unresolvable dynamic dim.
    """
    input_shapes = dict(input_shapes or {})
    inputs = graph_inputs(model)
    names = [vi.name for vi in inputs]
    unknown = sorted(set(input_shapes) - set(names))
    if unknown:
        raise ShapeError(f"--input names {', '.join(unknown)} not among the model's inputs "
                         f"({', '.join(names) or 'none'})")
    resolved: dict[str, Shape] = {}
    for vi in inputs:
        ttype = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise ShapeError(f"input {vi.name!r} is not a tensor; only tensor inputs are supported")
        dims = list(ttype.shape.dim) if ttype.HasField("shape") else None
        if vi.name in input_shapes:
            shape = tuple(input_shapes[vi.name])
            if dims is not None and len(dims) != len(shape):
                raise ShapeError(f"--input {vi.name}: rank {len(shape)} given, the model's "
                                 f"input has rank {len(dims)}")
            for i, (d, want) in enumerate(zip(dims or [], shape)):
                if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != want:
                    raise ShapeError(f"--input {vi.name}: dim {i} is fixed to {d.dim_value} "
                                     f"in the model, {want} given")
            if batch is not None and shape and shape[0] != batch:
                raise ShapeError(f"--input {vi.name}: first dim {shape[0]} conflicts with "
                                 f"--batch {batch}")
            resolved[vi.name] = shape
            continue
        if dims is None:
            raise ShapeError(f"input {vi.name!r} has no shape in the model; give it with "
                             f"--input {vi.name}:D1xD2x...")
        shape = []
        for i, d in enumerate(dims):
            if d.HasField("dim_value") and d.dim_value > 0:
                if i == 0 and batch is not None and d.dim_value != batch:
                    raise ShapeError(
                        f"input {vi.name!r} has a fixed batch dim of {d.dim_value}, "
                        f"--batch {batch} asked; re-export the model with a dynamic batch "
                        f"axis or use --batch {d.dim_value}")
                shape.append(d.dim_value)
            elif i == 0:
                shape.append(batch if batch is not None else 1)
            else:
                label = f" ({d.dim_param!r})" if d.dim_param else ""
                example = "x".join(str(x.dim_value) if x.HasField("dim_value") and x.dim_value > 0
                                   else "N" for x in dims)
                raise ShapeError(
                    f"input {vi.name!r} dim {i}{label} is dynamic and cannot be resolved; "
                    f"give the shape with --input {vi.name}:{example} (N = its size)")
        resolved[vi.name] = tuple(shape)
    return resolved


def skeleton(model: onnx.ModelProto, inputs: dict[str, Shape]) -> onnx.ModelProto:
    """A copy of the model fit for fast shape inference.

    Large initializers become typed graph inputs (dims only, no data); small
    ones keep their values; graph inputs get the resolved static shapes;
    graph outputs keep only their element type.
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
        sg.input.append(helper.make_tensor_value_info(vi.name, elem, list(inputs[vi.name])))
    for init in g.initializer:
        n = 1
        for d in init.dims:
            n *= d
        if n <= SMALL_INITIALIZER and init.data_location != TensorProto.EXTERNAL:
            sg.initializer.append(init)
        else:
            sg.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    for init in g.sparse_initializer:
        sg.input.append(helper.make_tensor_value_info(
            init.values.name, init.values.data_type, list(init.dims)))
    for vo in g.output:
        elem = vo.type.tensor_type.elem_type if vo.type.HasField("tensor_type") else 0
        sg.output.append(helper.make_tensor_value_info(vo.name, elem, None))
    return sk


def _collect(model: onnx.ModelProto) -> dict[str, TypedShape]:
    """name -> (elem_type, static shape) for every fully static tensor."""
    out: dict[str, TypedShape] = {}
    g = model.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            continue
        dims = []
        for d in tt.shape.dim:
            if not d.HasField("dim_value") or d.dim_value < 0:
                break
            dims.append(d.dim_value)
        else:
            out[vi.name] = (tt.elem_type, tuple(dims))
    for init in g.initializer:
        out[init.name] = (init.data_type, tuple(init.dims))
    return out


def _onnx_infer(sk: onnx.ModelProto) -> dict[str, TypedShape] | None:
    try:
        return _collect(onnx.shape_inference.infer_shapes(
            sk, check_type=False, strict_mode=False, data_prop=True))
    except (onnx.shape_inference.InferenceError, RuntimeError, ValueError) as exc:
        log.debug("onnx shape inference failed: %s", exc)
        return None


def infer_shapes(sk: onnx.ModelProto, needed: set[str], folded: list[onnx.NodeProto] = ()
                 ) -> tuple[dict[str, TypedShape], str]:
    """Infer static shapes; returns them and which engine produced them.

    ``needed`` are the tensors the caller must have shapes for. When onnx's
    inference (with data propagation) leaves some unresolved, the values of
    the ``folded`` (constant) nodes are computed with onnx's reference
    evaluator and injected as initializers, and inference runs again; as a
    last resort onnxruntime's symbolic shape inference is tried.
    """
    shapes = _onnx_infer(sk) or _collect(sk)
    engine = "onnx"
    values: dict[str, np.ndarray] = {}
    for _ in range(8):
        if not needed - shapes.keys() or not folded:
            break
        new = evaluate_constants(sk, folded, shapes, values)
        if not new:
            break
        values.update(new)
        again = _onnx_infer(_with_values(sk, values))
        if again is None:
            break
        shapes.update(again)
        engine = "onnx+constant-evaluation"
    missing = needed - shapes.keys()
    if not missing:
        return shapes, engine
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        sym = SymbolicShapeInference.infer_shapes(sk, auto_merge=True, guess_output_rank=True)
    except Exception as exc:  # noqa: BLE001 - the fallback is best effort by design
        log.debug("onnxruntime symbolic shape inference failed: %s", exc)
        return shapes, engine
    if sym is None:
        return shapes, engine
    sym_shapes = _collect(sym)
    if len(needed - sym_shapes.keys()) < len(missing):
        merged = dict(shapes)
        merged.update(sym_shapes)
        return merged, "onnxruntime-symbolic"
    return shapes, engine


def evaluate_constants(sk: onnx.ModelProto, folded: list[onnx.NodeProto],
                       shapes: dict[str, TypedShape], known: dict[str, np.ndarray]
                       ) -> dict[str, np.ndarray]:
    """Values of the folded nodes that can be computed now.

    ``Shape``/``Size`` take their input's inferred shape; other folded nodes
    run in onnx's reference evaluator when all their inputs have values
    (initializers with data, or earlier results). Nodes that need weights
    without data, or shapes not yet inferred, wait for a later round.
    """
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    avail: dict[str, np.ndarray] = dict(known)
    for init in sk.graph.initializer:
        if init.name not in avail:
            avail[init.name] = numpy_helper.to_array(init)
    new: dict[str, np.ndarray] = {}
    pending: list[onnx.NodeProto] = []
    ready = set(avail)
    for node in folded:
        outs = [o for o in node.output if o]
        if all(o in avail for o in outs):
            continue
        if node.op_type in ("Shape", "Size"):
            if node.input[0] in shapes:
                dims = np.array(shapes[node.input[0]][1], dtype=np.int64)
                if node.op_type == "Size":
                    val = np.array(int(np.prod(dims)), dtype=np.int64)
                else:
                    attrs = {a.name: a.i for a in node.attribute}
                    val = dims[attrs.get("start", 0):attrs.get("end")]
                avail[outs[0]] = new[outs[0]] = val
                ready.add(outs[0])
            continue
        if all(i == "" or i in ready for i in node.input):
            pending.append(node)
            ready.update(outs)
    if pending:
        inputs = sorted({i for n in pending for i in n.input if i and i in avail})
        graph = helper.make_graph(
            pending, "constants", [],
            [onnx.ValueInfoProto(name=o) for n in pending for o in n.output if o],
            initializer=[numpy_helper.from_array(np.asarray(avail[i]), i) for i in inputs])
        model = helper.make_model(graph, opset_imports=list(sk.opset_import))
        try:
            outs = ReferenceEvaluator(model).run(None, {})
        except Exception as exc:  # noqa: BLE001 - unsupported op: leave those unresolved
            log.debug("constant evaluation failed: %s", exc)
            return new
        names = [o for n in pending for o in n.output if o]
        new.update({n: np.asarray(v) for n, v in zip(names, outs)})
    return new


def _with_values(sk: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The skeleton with computed constants as initializers and their
    producing nodes removed."""
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(sk)
    keep = [n for n in out.graph.node if not all(o in values for o in n.output if o)]
    del out.graph.node[:]
    out.graph.node.extend(keep)
    have = {t.name for t in out.graph.initializer}
    out.graph.initializer.extend(numpy_helper.from_array(np.asarray(v), k)
                                 for k, v in values.items() if k not in have)
    return out
