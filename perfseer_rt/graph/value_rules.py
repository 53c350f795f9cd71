"""Values the Python shape pass (:mod:`perfseer_rt.graph.propagate`)
computes for shape subgraphs (``Shape -> Gather -> Concat -> Reshape``):
the numpy calls of onnx's reference evaluator per op, and the values and
types of initializers and graph inputs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from perfseer_rt.graph.limits import MAX_CONST_ELEMS, MAX_SHAPE_LEN
from perfseer_rt.graph.nodes import Attrs
from perfseer_rt.graph.shape_rules import ELEM_TYPES, NP_DTYPES, Args, TypedShape

# --------------------------------------------------------------------- values
ValueFn = Callable[[Args, Attrs, TypedShape], "np.ndarray | None"]


def _np_binary(fn: Callable[[np.ndarray, np.ndarray], Any]) -> ValueFn:
    def run(args: Args, attrs: Attrs, out: TypedShape) -> np.ndarray | None:
        a, b = args
        if a.dtype != b.dtype or a.dtype.kind not in "iuf":
            return None
        with np.errstate(all="ignore"):
            return np.asarray(fn(a, b)).astype(a.dtype, copy=False)
    return run


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """onnx's reference Div: truncation toward zero for integers."""
    if np.issubdtype(a.dtype, np.integer):
        if not b.all():
            raise ZeroDivisionError
        q = np.floor_divide(a, b)
        r = np.remainder(a, b)
        return np.asarray(q + ((r != 0) & ((a < 0) ^ (b < 0))).astype(q.dtype))
    return np.asarray(np.divide(a, b))


def _v_mod(args: Args, attrs: Attrs, out: TypedShape) -> np.ndarray | None:
    a, b = args
    if a.dtype != b.dtype or a.dtype.kind not in "iuf" or attrs.get("fmod", 0) not in (0, 1):
        return None
    if np.issubdtype(a.dtype, np.integer) and not b.all():
        return None
    with np.errstate(all="ignore"):
        res = np.fmod(a, b) if attrs.get("fmod", 0) else np.mod(a, b)
    return np.asarray(res).astype(a.dtype, copy=False)


def _v_compare(fn: Callable[[np.ndarray, np.ndarray], Any]) -> ValueFn:
    def run(args: Args, attrs: Attrs, out: TypedShape) -> np.ndarray | None:
        a, b = args
        if a.dtype != b.dtype:
            return None
        return np.asarray(fn(a, b))
    return run


def _v_gather(args: Args, attrs: Attrs, out: TypedShape) -> np.ndarray | None:
    data, idx = args
    if not np.issubdtype(idx.dtype, np.integer):
        return None
    return np.asarray(np.take(data, idx, axis=attrs.get("axis", 0)))


def _v_cast(args: Args, attrs: Attrs, out: TypedShape) -> np.ndarray | None:
    to = attrs["to"]
    if to not in NP_DTYPES or args[0].dtype not in ELEM_TYPES or len(attrs) > 1:
        return None
    return np.asarray(args[0].astype(NP_DTYPES[to]))


def _v_slice(args: Args, attrs: Attrs, out: TypedShape) -> np.ndarray | None:
    x = args[0]
    starts, ends = args[1].ravel().tolist(), args[2].ravel().tolist()
    axes = args[3].ravel().tolist() if len(args) > 3 and args[3] is not None else list(
        range(len(starts)))
    steps = args[4].ravel().tolist() if len(args) > 4 and args[4] is not None else [1] * len(
        starts)
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[a] = slice(s, e, st)
    return np.asarray(x[tuple(index)])


def _v_constant_of_shape(args: Args, attrs: Attrs, out: TypedShape) -> np.ndarray | None:
    value = attrs.get("value")
    if value is None:
        fill = np.array(0, dtype=np.float32)
    else:
        if value.data_type not in NP_DTYPES or value.data_location == onnx.TensorProto.EXTERNAL:
            return None
        fill = numpy_helper.to_array(value)
        if fill.size != 1:
            return None
        fill = fill.ravel()[0]
    return np.full(out[1], fill)


def _v_range(args: Args, attrs: Attrs, out: TypedShape) -> np.ndarray | None:
    start, limit, delta = (a.ravel()[0] for a in args)
    return np.arange(start, limit, delta, dtype=args[0].dtype)


def _v_transpose(args: Args, attrs: Attrs, out: TypedShape) -> np.ndarray | None:
    perm = attrs.get("perm")
    return np.asarray(np.transpose(args[0], perm))


#: op -> value function (inputs' values, attributes, output type) -> value.
#: The numpy calls of onnx's reference evaluator for these ops.
VALUES: dict[str, ValueFn] = {
    "Identity": lambda a, at, o: a[0].copy(),
    "Gather": _v_gather,
    "Unsqueeze": lambda a, at, o: a[0].reshape(o[1]),
    "Squeeze": lambda a, at, o: a[0].reshape(o[1]),
    "Reshape": lambda a, at, o: a[0].reshape(o[1]),
    "Flatten": lambda a, at, o: a[0].reshape(o[1]),
    "Concat": lambda a, at, o: np.concatenate(a, axis=at["axis"]),
    "Slice": _v_slice,
    "Cast": _v_cast,
    "Add": _np_binary(np.add), "Sub": _np_binary(np.subtract),
    "Mul": _np_binary(np.multiply), "Div": _np_binary(_int_div), "Mod": _v_mod,
    "Equal": _v_compare(np.equal), "Less": _v_compare(np.less),
    "Greater": _v_compare(np.greater), "LessOrEqual": _v_compare(np.less_equal),
    "GreaterOrEqual": _v_compare(np.greater_equal),
    "And": _v_compare(np.logical_and), "Or": _v_compare(np.logical_or),
    "Not": lambda a, at, o: np.logical_not(a[0]),
    "Neg": lambda a, at, o: np.negative(a[0]) if a[0].dtype.kind in "if" else None,
    "Abs": lambda a, at, o: np.absolute(a[0]) if a[0].dtype.kind in "iuf" else None,
    "Where": lambda a, at, o: np.asarray(np.where(a[0], a[1], a[2])) if a[1].dtype == a[2].dtype
    else None,
    "Expand": lambda a, at, o: np.broadcast_to(a[0], o[1]).copy(),
    "ConstantOfShape": _v_constant_of_shape,
    "Range": _v_range,
    "Transpose": _v_transpose,
}



def tensor_value(t: onnx.TensorProto) -> np.ndarray | None:
    """The value of a TensorProto with data in the file (None: external or
    undecodable data), as ``numpy_helper.to_array`` gives it; raw data of the
    plain numeric types without its overhead."""
    if t.data_location == onnx.TensorProto.EXTERNAL:
        return None
    try:
        dtype = NP_DTYPES.get(t.data_type)
        if dtype is not None and t.HasField("raw_data") and not t.HasField("segment") \
                and _LITTLE_ENDIAN:
            raw: np.ndarray = np.frombuffer(t.raw_data, dtype=dtype)
            dims = t.dims[:]  # a list: reshape converts the repeated field itself slowly
            # a 1-D tensor of its own length is already shaped (reshape would only check it)
            return raw if len(dims) == 1 and raw.shape[0] == dims[0] else raw.reshape(dims)
        decoded: np.ndarray = numpy_helper.to_array(t)
        return decoded
    except Exception:  # noqa: BLE001 - undecodable data: not a usable constant
        return None


_LITTLE_ENDIAN = sys.byteorder == "little"


def static_type(tp: onnx.TypeProto) -> TypedShape | None:
    """(elem_type, shape) of a TypeProto with every dim a number >= 0."""
    if not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    dims = []
    for d in tp.tensor_type.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        dims.append(d.dim_value)
    return tp.tensor_type.elem_type, tuple(dims)


#: Initializers of at most this many elements are in the skeleton with
#: their data (shapes.SMALL_INITIALIZER): onnx's first pass reads them.
_SMALL = 64
#: Types of the larger initializers whose data the per-node completion reads.
_LATE_TYPES = frozenset({1, 6, 7, 9})


def value_sources(initializers: Sequence[onnx.TensorProto],
                  read: Sequence[tuple[str, int, tuple[int, ...], int, bool]]
                  ) -> tuple[dict[str, onnx.TensorProto], set[str]]:
    """The initializers whose values onnx's inference may read, and which of
    them only its per-node completion reads (see
    :func:`perfseer_rt.graph.shapes.infer_shapes`). ``read`` holds each
    initializer's (name, data type, dims, elements, data in the file)."""
    out: dict[str, onnx.TensorProto] = {}
    late: set[str] = set()
    for t, (name, data_type, _, n, in_file) in zip(initializers, read):
        if not in_file:
            continue
        if n <= _SMALL:
            out[name] = t
        elif n <= MAX_CONST_ELEMS and data_type in _LATE_TYPES:
            out[name] = t
            late.add(name)
    return out, late


def long_1d(typed: dict[str, TypedShape]) -> bool:
    """Whether a typed input is 1-D and longer than MAX_SHAPE_LEN (onnx's
    data propagation is then turned off; the pass does not model that)."""
    return any(len(s) == 1 and s[0] > MAX_SHAPE_LEN for _, s in typed.values())
