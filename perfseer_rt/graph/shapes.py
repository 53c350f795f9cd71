"""Static shapes of every tensor: input resolution and shape inference.

Dynamic input dims are resolved from the caller's batch size, named dims
(``dims={"seq": 128}`` sets every input dim called ``seq``) and explicit
input shapes; then onnx's shape inference (with data propagation) runs on a
*skeleton* of the model whose large initializers carry no data, so models
with 100 MB of embedded weights infer as fast as structure-only ones. Where
onnx leaves a tensor unresolved, the small constant tensors of folded shape
subgraphs are computed (onnx's reference evaluator, bounded by
:data:`~perfseer_rt.graph.limits.MAX_CONST_ELEMS`) and inference runs again.
No other engine runs: nothing is written to disk and nothing is imported
beyond onnx.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from perfseer_rt.errors import GraphError, LimitError, PerfSeerError, ShapeError
from perfseer_rt.graph import dim_expressions, sequences
from perfseer_rt.graph.limits import (
    MAX_BATCH,
    MAX_CONST_ELEMS,
    MAX_DIM,
    MAX_RANK,
    MAX_SHAPE_LEN,
    MIN_BATCH,
    Deadline,
)
from perfseer_rt.graph.propagate import static_type

log = logging.getLogger(__name__)

#: Initializers at most this many elements keep their data in the skeleton
#: (shape data propagation needs the values of small int tensors).
SMALL_INITIALIZER = 64

Shape = tuple[int, ...]
TypedShape = tuple[int, Shape]  # (elem_type, shape)

#: Input positions at which a static graph input is a weight (structure-only
#: exports that turn parameters into graph inputs).
WEIGHT_POSITIONS: dict[str, frozenset[int]] = {
    "Conv": frozenset({1, 2}), "ConvTranspose": frozenset({1, 2}),
    "Gemm": frozenset({1, 2}), "MatMul": frozenset({1}),
    "BatchNormalization": frozenset({1, 2, 3, 4}),
    "LayerNormalization": frozenset({1, 2}), "InstanceNormalization": frozenset({1, 2}),
    "GroupNormalization": frozenset({1, 2}), "Gather": frozenset({0}),
    "PRelu": frozenset({1}), "MatMulInteger": frozenset({1}),
}
#: Name endings that mark a graph input as a parameter wherever it is used.
WEIGHT_SUFFIXES = (".weight", ".bias", ".running_mean", ".running_var", ".gamma", ".beta",
                   "num_batches_tracked")


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The real inputs of the graph (initializers listed as inputs excluded)."""
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def _static_dims(vi: onnx.ValueInfoProto) -> Shape | None:
    """The input's shape when every dim is a positive number, else None."""
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value <= 0:
            return None
        dims.append(d.dim_value)
    return tuple(dims)


def weight_inputs(model: onnx.ModelProto) -> dict[str, Shape]:
    """Graph inputs that are weights: a fully static shape, and either a
    parameter-like name (``*.weight``, ``*.bias``...) or used only at weight
    positions (:data:`WEIGHT_POSITIONS`; a MatMul right operand only when
    2-D). They are costed as weights and take no batch size."""
    inputs = {vi.name: vi for vi in graph_inputs(model)}
    if len(inputs) < 2:
        return {}
    static = {n: s for n, vi in inputs.items() if (s := _static_dims(vi)) is not None}
    if not static:
        return {}
    uses: dict[str, list[bool]] = {n: [] for n in static}
    matmul_rhs = set()  # a MatMul weight is 2-D; batched right operands are data
    alias = {}  # Identity output -> the input it copies (exporters share equal weights so)
    for node in model.graph.node:
        if node.op_type == "Identity" and node.input and node.input[0] in uses and node.output:
            alias[node.output[0]] = node.input[0]
    for node in model.graph.node:
        if node.op_type in ("MatMul", "MatMulInteger") and len(node.input) > 1:
            matmul_rhs.add(alias.get(node.input[1], node.input[1]))
        if node.op_type == "Identity" and node.input and node.input[0] in uses:
            continue  # judged by how its output is used
        pos_ok = WEIGHT_POSITIONS.get(node.op_type, frozenset())
        for pos, t in enumerate(node.input):
            t = alias.get(t, t)
            if t in uses:
                uses[t].append(pos in pos_ok)
    found = {n: static[n] for n, u in uses.items()
             if u and (all(u) or n.endswith(WEIGHT_SUFFIXES))
             and (n not in matmul_rhs or len(static[n]) <= 2)}
    if len(found) == len(inputs):  # at least one input must stay data
        return {}
    return found


def _check_dim_value(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ShapeError(f"{what}: {value!r} is not an integer")
    n = int(value)
    if not 0 <= n <= MAX_DIM:
        raise ShapeError(f"{what}: {n} is outside 0..{MAX_DIM}")
    return n


def check_batch(batch: object) -> int | None:
    """``batch`` as an int in ``MIN_BATCH..MAX_BATCH`` (None stays None)."""
    if batch is None:
        return None
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)):
        raise ShapeError(f"batch {batch!r} is not an integer")
    if not MIN_BATCH <= int(batch) <= MAX_BATCH:
        raise ShapeError(f"batch {batch} is outside the supported range "
                         f"{MIN_BATCH}..{MAX_BATCH}")
    return int(batch)


def resolve_inputs(model: onnx.ModelProto, batch: int | None,
                   input_shapes: dict[str, Shape] | None,
                   dims: dict[str, int] | None = None,
                   weights: dict[str, Shape] | None = None,
                   samples: set[str] | None = None) -> dict[str, Shape]:
    """A static shape for every graph input.

    Rules: an explicitly given shape wins (its rank must match); weight
    inputs (:func:`weight_inputs`) keep their static shape; a dynamic dim
    whose symbolic name is in ``dims`` takes that value; otherwise a dynamic
    first dim takes ``batch`` (1 when no batch is given); a static first dim
    that differs from ``batch`` is an error, except on a 1-D input (a
    fixed-length vector such as a merged decoder's ``use_cache_branch``) and
    on an input in ``samples`` (one sample: :mod:`perfseer_rt.graph.samples`),
    which takes only a batch of 1. Every dim left unresolved is
    listed in one error.

    Raises:
        ShapeError: unknown input name, rank mismatch, batch conflict, a
            value out of range, or unresolvable dynamic dims (all named).
    """
    batch = check_batch(batch)
    input_shapes = {name: tuple(_check_dim_value(f"input {name!r} dim {i}", d)
                                for i, d in enumerate(shape))
                    for name, shape in (input_shapes or {}).items()}
    dims = {str(k): _check_dim_value(f"dim {k!r}", v) for k, v in (dims or {}).items()}
    weights = weights or {}
    inputs = graph_inputs(model)
    names = [vi.name for vi in inputs]
    unknown = sorted(set(input_shapes) - set(names))
    if unknown:
        raise ShapeError(f"--input names {', '.join(unknown)} not among the model's inputs "
                         f"({', '.join(names) or 'none'})")
    resolved: dict[str, Shape] = {}
    unresolved: list[str] = []
    params_seen: set[str] = set()
    for vi in inputs:
        if not vi.type.HasField("tensor_type"):
            raise ShapeError(f"input {vi.name!r} is not a tensor; only tensor inputs are supported")
        ttype = vi.type.tensor_type
        mdims = list(ttype.shape.dim) if ttype.HasField("shape") else None
        if vi.name in input_shapes:
            shape = input_shapes[vi.name]
            if mdims is not None and len(mdims) != len(shape):
                raise ShapeError(f"--input {vi.name}: rank {len(shape)} given, the model's "
                                 f"input has rank {len(mdims)}")
            for i, (d, want) in enumerate(zip(mdims or [], shape)):
                if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != want:
                    raise ShapeError(f"--input {vi.name}: dim {i} is fixed to {d.dim_value} "
                                     f"in the model, {want} given")
            if batch is not None and len(shape) > 1 and shape[0] != batch \
                    and vi.name not in weights:
                raise ShapeError(f"--input {vi.name}: first dim {shape[0]} conflicts with "
                                 f"--batch {batch}")
            resolved[vi.name] = shape
            continue
        if vi.name in weights:
            resolved[vi.name] = weights[vi.name]
            continue
        if mdims is None:
            unresolved.append(f"input {vi.name!r} has no shape in the model (give it with "
                              f"--input {vi.name}:D1xD2x...)")
            continue
        if vi.name in (samples or ()) and batch is not None and batch != 1:
            shown = [d.dim_value or d.dim_param or "?" for d in mdims]
            raise ShapeError(f"input {vi.name!r} {shown} holds one sample (the model adds its "
                             f"batch axis itself) and runs one at a time: predict it at "
                             f"--batch 1, not {batch}")
        dims_out: list[int] = []
        for i, d in enumerate(mdims):
            if isinstance(d.dim_param, bytes):  # protobuf hands invalid UTF-8 back as bytes
                raise GraphError(f"input {vi.name!r} dim {i}: its symbolic name is not valid UTF-8")
            if d.HasField("dim_value") and d.dim_value > 0:
                # a 1-D input of fixed length is not batched (optimum's merged decoders
                # take use_cache_branch: bool[1]), as the profiler reads it too
                if i == 0 and batch is not None and d.dim_value != batch and len(mdims) > 1 \
                        and vi.name not in (samples or ()):
                    raise ShapeError(
                        f"input {vi.name!r} has a fixed batch dim of {d.dim_value}, "
                        f"--batch {batch} asked; re-export the model with a dynamic batch "
                        f"axis or use --batch {d.dim_value}")
                dims_out.append(d.dim_value)
            elif d.dim_param and d.dim_param in dims:
                dims_out.append(dims[d.dim_param])
            elif d.dim_param and (value := dim_expressions.evaluate(d.dim_param, dims)) \
                    is not None:  # "past_sequence_length + sequence_length"
                dims_out.append(_check_dim_value(f"input {vi.name!r} dim {i} "
                                                 f"({d.dim_param!r})", value))
            elif i == 0:
                dims_out.append(batch if batch is not None else 1)
            else:
                label = f" ({d.dim_param!r})" if d.dim_param else ""
                unresolved.append(f"input {vi.name!r} dim {i}{label} is dynamic")
                if d.dim_param:  # an expression's names, not the expression
                    params_seen.update(n for n in dim_expressions.names(d.dim_param)
                                       if n not in dims)
                    if not dim_expressions.names(d.dim_param):
                        params_seen.add(d.dim_param)
                dims_out.append(-1)
        resolved[vi.name] = tuple(dims_out)
        for i, d in enumerate(dims_out):
            if d > MAX_DIM:
                raise ShapeError(f"input {vi.name!r} dim {i} is {d}, over the supported "
                                 f"maximum {MAX_DIM}")
    if unresolved:
        hint = " ".join(f"--dim {p}=N" for p in sorted(params_seen))
        raise ShapeError(
            f"{len(unresolved)} input dim(s) cannot be resolved: "
            + "; ".join(unresolved)
            + (f"; give them with {hint} (N = its size) or --input NAME:D1xD2x..." if hint
               else "; give them with --input NAME:D1xD2x..."))
    return resolved


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
        again = _onnx_infer(_with_values(sk, values), data_prop)
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


def _with_initializers(sk: onnx.ModelProto, known: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``known`` constants plus every decodable initializer of ``sk`` not among them."""
    avail: dict[str, np.ndarray] = dict(known)
    for init in sk.graph.initializer:
        if init.name not in avail:
            try:
                avail[init.name] = numpy_helper.to_array(init)
            except Exception:  # noqa: BLE001 - undecodable data: not a usable constant
                continue
    return avail


def _complete_per_node(sk: onnx.ModelProto, folded: Sequence[onnx.NodeProto],
                       shapes: dict[str, TypedShape], known: dict[str, np.ndarray],
                       deadline: Deadline | None, fill: Fill | None = None
                       ) -> tuple[dict[str, TypedShape], bool] | None:
    """Shapes that whole-graph inference left open, in one topological pass.

    Folded nodes get their values (:func:`_fast_value`, ``Shape``/``Size``
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
    avail = _with_initializers(sk, known)
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
                elif not (op == "Constant" and not _constant_has_data(node)) \
                        and op not in sequences.PRODUCERS:  # a list is not an array
                    vals = _fast_value(node, avail)
                    if vals is None and all(i == "" or i in avail for i in node.input) \
                            and not _output_too_big(node, avail):
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
        if _elems(t.dims) > MAX_CONST_ELEMS or t.data_type not in (6, 7, 1, 9):
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


def _elems(shape: Iterable[Any]) -> int:
    n = 1
    for d in shape:
        n *= max(int(d), 0)
    return n


#: Folded ops whose output size is set by their inputs' values.
_SIZED_BY_VALUE = frozenset({"ConstantOfShape", "Expand", "Tile", "Range"})


def _output_too_big(node: onnx.NodeProto, avail: dict[str, np.ndarray]) -> bool:
    """Whether a folded node would materialise more than MAX_CONST_ELEMS
    elements (ConstantOfShape/Expand/Tile/Range sized by their inputs)."""
    try:
        if any(i in avail and np.asarray(avail[i]).size > MAX_CONST_ELEMS for i in node.input):
            return True
        op = node.op_type
        if op == "ConstantOfShape":
            return _elems(np.asarray(avail[node.input[0]]).ravel()) > MAX_CONST_ELEMS
        if op == "Expand":
            x = np.asarray(avail[node.input[0]])
            want = np.asarray(avail[node.input[1]]).ravel()
            r = max(x.ndim, len(want))
            xs = (1,) * (r - x.ndim) + x.shape
            ws = (1,) * (r - len(want)) + tuple(int(v) for v in want)
            return _elems(max(a, b) for a, b in zip(xs, ws)) > MAX_CONST_ELEMS
        if op == "Tile":
            x = np.asarray(avail[node.input[0]])
            reps = np.asarray(avail[node.input[1]]).ravel()
            return x.size * _elems(reps) > MAX_CONST_ELEMS
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

    avail = _with_initializers(sk, known)
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
        if node.op_type == "Constant" and not _constant_has_data(node):
            continue  # a structure-only export stripped its value
        fast = _fast_value(node, avail)
        if fast is not None and len(fast) == len(outs):
            for o, v in zip(outs, fast):
                avail[o] = new[o] = v
            ready.update(outs)
            continue
        if node.op_type in _SIZED_BY_VALUE:  # its size needs its inputs' values now
            ok = all(i == "" or i in avail for i in node.input) and not _output_too_big(node, avail)
        else:
            ok = all(i == "" or i in ready for i in node.input) and not _output_too_big(
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


def _fast_value(node: onnx.NodeProto, avail: dict[str, np.ndarray]) -> tuple[np.ndarray] | None:
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


def _constant_has_data(node: onnx.NodeProto) -> bool:
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


def _with_values(sk: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
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
