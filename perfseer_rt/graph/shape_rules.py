"""Shape rules of the Python shape pass (:mod:`perfseer_rt.graph.propagate`)
for elementwise, normalization, convolution, pooling and matrix ops, and
the types and helpers every rule shares. Each rule follows onnx's own shape
inference (``onnx/defs/*/defs.cc``) and raises :class:`GiveUp` where onnx
would fail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import onnx

from perfseer_rt.graph.nodes import Attrs

Shape = tuple[int, ...]
TypedShape = tuple[int, Shape]
#: Input types by position (None: absent, or not known).
Types = list["TypedShape | None"]
#: A rule's getter of an input's constant value by position.
ValueOf = Callable[[int], "np.ndarray | None"]
#: Output types (None: the rule leaves the node to onnx).
Result = list["TypedShape"] | None
#: A rule: (input types, a value getter by input position, attributes,
#: number of outputs, since_version of the op's schema) -> Result.
Rule = Callable[[Types, ValueOf, Attrs, int, int], Result]
#: A value function's inputs: the constant values by position (None for an
#: absent optional input).
Args = list[Any]

#: Largest dim value the pass works with (onnx's arithmetic is int64).
MAX_DIM_VALUE = 1 << 62
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_AT = onnx.AttributeProto
BOOL, INT64, FLOAT = 9, 7, 1
#: ONNX element type -> numpy dtype of the values computed here.
NP_DTYPES: dict[int, np.dtype[Any]] = {1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8),
       4: np.dtype(np.uint16), 5: np.dtype(np.int16), 6: np.dtype(np.int32),
       7: np.dtype(np.int64), 9: np.dtype(np.bool_), 10: np.dtype(np.float16),
       11: np.dtype(np.float64), 12: np.dtype(np.uint32), 13: np.dtype(np.uint64)}
ELEM_TYPES = {v: k for k, v in NP_DTYPES.items()}
#: Element types onnx's inference accepts from a Cast ``to`` (and whose
#: size perfseer-rt knows): every numeric type and bool.
_CAST_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16, 17, 18, 19, 20, 21, 22,
                         23, 24, 25, 26, 27, 28})


class GiveUp(Exception):
    """The pass cannot decide a shape exactly as onnx would: the caller
    falls back to onnx's whole-graph inference."""


# --------------------------------------------------------------------- attributes
def int_attr(attrs: Attrs, name: str, default: int) -> int:
    """An INT attribute that onnx reads as a C ``int``."""
    v = attrs.get(name, default)
    if type(v) is not int or not _INT_MIN <= v <= _INT_MAX:
        raise GiveUp(name)
    return v


def ints_attr(attrs: Attrs, name: str) -> list[int] | None:
    v = attrs.get(name)
    if v is None:
        return None
    if type(v) is not list:
        raise GiveUp(name)
    return v


# --------------------------------------------------------------------- shape rules
def broadcast(shapes: Sequence[Shape]) -> Shape:
    """onnx's multidirectional broadcast of static shapes (GiveUp where
    onnx fails with incompatible dimensions)."""
    if len(shapes) == 2:
        a, b = shapes
        if a == b:
            return a
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        val = 1
        for s in shapes:
            j = i - rank + len(s)
            if j < 0:
                continue
            d = s[j]
            if d != 1:
                if val != d and val != 1:
                    raise GiveUp("incompatible dims")
                val = d
        out.append(val)
    return tuple(out)


def _same(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    return None if x is None else [x]


def _to_bool(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    return None if x is None else [(BOOL, x[1])]


def _binary(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    if len(ins) != 2 or ins[0] is None or ins[1] is None:
        return None
    return [(ins[0][0], broadcast((ins[0][1], ins[1][1])))]


def _compare(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    if len(ins) != 2 or ins[0] is None or ins[1] is None:
        return None
    return [(BOOL, broadcast((ins[0][1], ins[1][1])))]


def known_types(ins: Types) -> list[TypedShape] | None:
    """``ins`` when every input is present and typed, else None."""
    return None if any(t is None for t in ins) else cast("list[TypedShape]", ins)


def _variadic(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    known = known_types(ins)
    if not known:
        return None
    return [(known[0][0], broadcast([t[1] for t in known]))]


def _where(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    known = known_types(ins)
    if known is None or len(known) != 3:
        return None
    return [(known[1][0], broadcast([t[1] for t in known]))]


def _cast(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    to = attrs.get("to")
    if ins[0] is None or type(to) is not int or to not in _CAST_TYPES or len(attrs) > 1 + (
            "saturate" in attrs) + ("round_mode" in attrs):
        return None
    return [(to, ins[0][1])]


def _cast_like(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    if len(ins) != 2 or ins[0] is None or ins[1] is None:
        return None
    return [(ins[1][0], ins[0][1])]


def _softmax(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    if x is None:
        return None
    r = len(x[1])
    axis = int_attr(attrs, "axis", -1)
    if r < 1 or not -r <= axis < r:
        return None
    return [x]


def _dropout(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    if x is None or any(t is not None and t[1] != () for t in ins[1:3]) or len(ins) > 3:
        return None
    if n_out == 2:
        return [x, (BOOL, x[1])]
    return [x]


def _batchnorm(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    known = known_types(ins)
    if known is None or len(known) != 5 or n_out != 1 or int_attr(
            attrs, "training_mode", 0) != 0:
        return None
    x = known[0]
    c = x[1][1] if len(x[1]) > 1 else 1
    if any(t[1] != (c,) for t in known[1:]):
        return None
    return [x]


def _layernorm(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    if x is None or "stash_type" in attrs and type(attrs["stash_type"]) is not int:
        return None
    r = len(x[1])
    axis = attrs.get("axis", -1)
    if type(axis) is not int:
        return None
    if axis < 0:
        axis += r
    if axis < 0:
        return None
    out = [x]
    if n_out > 1:
        stash = attrs.get("stash_type", FLOAT)
        if stash not in _CAST_TYPES:
            return None
        reduced = tuple(d if i < axis else 1 for i, d in enumerate(x[1]))
        out += [(stash, reduced)] * (min(n_out, 3) - 1)
    return out


def _c_div(a: int, b: int) -> int:
    """C++ integer division (truncation toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _conv_pool(xs: Shape, w: Shape | None, attrs: Attrs, use_dilation: bool) -> Shape | None:
    """onnx's ``convPoolShapeInference`` for static shapes and ceil_mode 0:
    input shape ``xs``, and the weight's shape ``w`` for a convolution."""
    if len(xs) < 3 or int_attr(attrs, "ceil_mode", 0) != 0:
        return None
    n = len(xs) - 2
    dil = ints_attr(attrs, "dilations") if use_dilation else None
    if dil is None:
        dil = [1] * n
    strides = ints_attr(attrs, "strides")
    if strides is None:
        strides = [1] * n
    kernel = ints_attr(attrs, "kernel_shape")
    if kernel is None:
        if w is None:
            return None
        kernel = list(w[2:])
    pads = ints_attr(attrs, "pads")
    if len(dil) != n or len(strides) != n or len(kernel) != n or pads is not None and len(
            pads) != 2 * n:
        return None
    if min(dil) <= 0 or min(strides) <= 0 or min(kernel) <= 0 or pads is not None and min(
            pads) < 0:
        return None
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    if pads is None:
        pads = [0] * (2 * n)
        auto = attrs.get("auto_pad")
        if auto is not None and type(auto) is not str:
            return None
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            for i in range(n):
                residual = xs[2 + i] % strides[i] if strides[i] > 1 else 0
                total = max((eff[i] - strides[i]) if residual == 0 else (eff[i] - residual), 0)
                small, big = total >> 1, total - (total >> 1)
                pads[i], pads[i + n] = (small, big) if auto == "SAME_UPPER" else (big, small)
    if w is not None:
        if len(w) < 1:
            return None
        out = [xs[0], w[0]]
    else:
        out = [xs[0], xs[1]]
    for i in range(n):
        num = xs[2 + i] + pads[i] + pads[i + n] - eff[i]
        out.append(_c_div(num, strides[i]) + 1)
    return tuple(out) if min(out) >= 0 else None


def _conv(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    w = ins[1] if len(ins) > 1 else None
    if x is None or w is None:
        return None
    shape = _conv_pool(x[1], w[1], attrs, True)
    return None if shape is None else [(x[0], shape)]


def _pool(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    if x is None or n_out != 1 or since < 10 and "dilations" in attrs:
        return None
    shape = _conv_pool(x[1], None, attrs, True)
    return None if shape is None else [(x[0], shape)]


def _avgpool(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    if x is None or n_out != 1 or since < 19 and "dilations" in attrs:
        return None
    shape = _conv_pool(x[1], None, attrs, since >= 19)
    return None if shape is None else [(x[0], shape)]


def _global_pool(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    if x is None or len(x[1]) < 2:
        return None
    return [(x[0], x[1][:2] + (1,) * (len(x[1]) - 2))]


def _gemm(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    if len(ins) < 2 or ins[0] is None or ins[1] is None:
        return None
    a, b = ins[0][1], ins[1][1]
    if len(a) != 2 or len(b) != 2:
        return None
    ta = attrs.get("transA", 0)
    tb = attrs.get("transB", 0)
    if type(ta) is not int or type(tb) is not int:
        return None
    m, k = (a[1], a[0]) if ta & 0xFFFFFFFF else a
    k2, n = (b[1], b[0]) if tb & 0xFFFFFFFF else b
    if k != k2:
        return None
    return [(ins[0][0], (m, n))]


def _matmul(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    if len(ins) != 2 or ins[0] is None or ins[1] is None:
        return None
    a, b = ins[0][1], ins[1][1]
    if not a or not b:
        return None
    la = (1, a[0]) if len(a) == 1 else a
    lb = (b[0], 1) if len(b) == 1 else b
    if la[-1] != lb[-2]:
        return None
    out = broadcast((la[:-2], lb[:-2]))
    if len(a) != 1:
        out += (la[-2],)
    if len(b) != 1:
        out += (lb[-1],)
    return [(ins[0][0], out)]



#: Rules whose output dims are dims of their inputs (already in range).
COMPUTE_KEEP_DIMS = frozenset({_same, _to_bool, _binary, _compare, _variadic, _where, _cast,
                               _cast_like, _softmax, _dropout, _batchnorm, _layernorm, _matmul,
                               _gemm, _global_pool})

#: op -> (rule, lowest since_version of the op's schema the rule models).
COMPUTE_RULES: dict[str, tuple[Rule, int]] = {
    **{op: (_same, 6) for op in (
        "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Reciprocal",
        "Floor", "Ceil", "HardSigmoid", "LeakyRelu", "Elu", "Selu", "Softplus", "Softsign")},
    "Not": (_to_bool, 1),
    **{op: (_same, 1) for op in ("Identity", "Sin", "Cos", "Tan", "Round", "Sign",
                                 "Erf", "HardSwish", "Gelu", "Celu", "Mish", "ThresholdedRelu")},
    "Clip": (_same, 11), "IsNaN": (_to_bool, 9), "IsInf": (_to_bool, 10),
    **{op: (_binary, 7) for op in ("Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift")},
    **{op: (_compare, 7) for op in ("Equal", "Less", "Greater", "LessOrEqual",
                                    "GreaterOrEqual", "And", "Or", "Xor")},
    **{op: (_variadic, 8) for op in ("Sum", "Max", "Min", "Mean")},
    "Where": (_where, 9), "Cast": (_cast, 6), "CastLike": (_cast_like, 15),
    "Softmax": (_softmax, 13), "LogSoftmax": (_softmax, 13), "Dropout": (_dropout, 12),
    "BatchNormalization": (_batchnorm, 14), "LayerNormalization": (_layernorm, 17),
    "Conv": (_conv, 11), "MaxPool": (_pool, 8), "AveragePool": (_avgpool, 7),
    "GlobalAveragePool": (_global_pool, 1), "GlobalMaxPool": (_global_pool, 1),
    "Gemm": (_gemm, 11), "MatMul": (_matmul, 9),
    # onnx's schemas give these no shape inference (their functions only): as their input
    "GroupNormalization": (_same, 18), "MeanVarianceNormalization": (_same, 9),
}
