"""Input shapes: which static graph inputs are weights, and every data
input's shape resolved from the caller's batch size, named dims
(``dims={"seq": 128}`` sets every input dim called ``seq``) and explicit
input shapes (:func:`resolve_inputs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from perfseer_rt.errors import GraphError, ShapeError
from perfseer_rt.graph import dim_expressions
from perfseer_rt.graph.limits import MAX_BATCH, MAX_DIM, MIN_BATCH

Shape = tuple[int, ...]

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


def check_shape_options(input_shapes: object, dims: object) -> None:
    """The extraction options' types, before any model is read: ``input_shapes``
    a mapping of input names to sequences of dims, ``dims`` a mapping of dim
    names to values (None for either: not given; the values themselves are
    checked where they are used).

    Raises:
        ShapeError: either is of another type.
    """
    if input_shapes is not None:
        if not isinstance(input_shapes, Mapping):
            raise ShapeError(f"input_shapes: expected a dict of input name -> shape (a list of "
                             f"ints), got {type(input_shapes).__name__}")
        for name, shape in input_shapes.items():
            if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
                raise ShapeError(f"input {name!r}: shape {shape!r} is not a list of ints")
    if dims is not None and not isinstance(dims, Mapping):
        raise ShapeError(f"dims: expected a dict of dim name -> value, got {type(dims).__name__}")


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
                if i == 0 and batch is not None and dims[d.dim_param] != batch and len(mdims) > 1:
                    raise ShapeError(f"--dim {d.dim_param}={dims[d.dim_param]} conflicts with --batch "
                                     f"{batch} (input {vi.name!r} dim 0 is {d.dim_param!r}); give one")
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
