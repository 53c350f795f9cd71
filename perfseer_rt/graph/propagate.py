"""Static shape propagation in Python for the ops real exporters emit.

One topological pass over the node table gives every tensor its element
type and static shape, with the rules of onnx's own shape inference
(``onnx/defs/*/defs.cc``) for the common ops, and onnx's inference of that
one node (``infer_node_outputs``) for any other standard op. Shape
subgraphs (``Shape -> Gather -> Concat -> Reshape``) are evaluated on
demand: a rule that needs a tensor's value (a Reshape target, Slice
bounds, Unsqueeze axes...) computes it from the folded nodes that produce
it, with the same numpy calls as onnx's reference evaluator.

The pass is an accelerator, not an authority: on anything it does not
model exactly (control flow, custom domains, an attribute of an unexpected
type, a rule's error case, an unresolved tensor that the PerfGraph needs)
it gives up and :func:`perfseer_rt.graph.shapes.infer_shapes` (onnx's
whole-graph inference on the skeleton) decides, as before. Where it
succeeds its shapes equal onnx's; ``tests/test_propagate.py`` compares the
two on real models, built graphs and fuzzed ones, rule by rule and whole.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import onnx
from onnx import numpy_helper

from perfseer_rt.graph.limits import MAX_CONST_ELEMS, MAX_RANK, MAX_SHAPE_LEN, Deadline
from perfseer_rt.graph.nodes import CACHED_KEY_CHARS, Attrs, Row, attribute_keys

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
_MAX_DIM = 1 << 62
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_AT = onnx.AttributeProto
BOOL, INT64, FLOAT = 9, 7, 1
#: ONNX element type -> numpy dtype of the values computed here.
_NP: dict[int, np.dtype[Any]] = {1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8),
       4: np.dtype(np.uint16), 5: np.dtype(np.int16), 6: np.dtype(np.int32),
       7: np.dtype(np.int64), 9: np.dtype(np.bool_), 10: np.dtype(np.float16),
       11: np.dtype(np.float64), 12: np.dtype(np.uint32), 13: np.dtype(np.uint64)}
_ELEM = {v: k for k, v in _NP.items()}
#: Element types onnx's inference accepts from a Cast ``to`` (and whose
#: size perfseer-rt knows): every numeric type and bool.
_CAST_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16, 17, 18, 19, 20, 21, 22,
                         23, 24, 25, 26, 27, 28})


class GiveUp(Exception):
    """The pass cannot decide a shape exactly as onnx would: the caller
    falls back to onnx's whole-graph inference."""


# --------------------------------------------------------------------- attributes
def _int_attr(attrs: Attrs, name: str, default: int) -> int:
    """An INT attribute that onnx reads as a C ``int``."""
    v = attrs.get(name, default)
    if type(v) is not int or not _INT_MIN <= v <= _INT_MAX:
        raise GiveUp(name)
    return v


def _ints_attr(attrs: Attrs, name: str) -> list[int] | None:
    v = attrs.get(name)
    if v is None:
        return None
    if type(v) is not list:
        raise GiveUp(name)
    return v


# --------------------------------------------------------------------- shape rules
def _broadcast(shapes: Sequence[Shape]) -> Shape:
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
    return [(ins[0][0], _broadcast((ins[0][1], ins[1][1])))]


def _compare(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    if len(ins) != 2 or ins[0] is None or ins[1] is None:
        return None
    return [(BOOL, _broadcast((ins[0][1], ins[1][1])))]


def _known(ins: Types) -> list[TypedShape] | None:
    """``ins`` when every input is present and typed, else None."""
    return None if any(t is None for t in ins) else cast("list[TypedShape]", ins)


def _variadic(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    known = _known(ins)
    if not known:
        return None
    return [(known[0][0], _broadcast([t[1] for t in known]))]


def _where(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    known = _known(ins)
    if known is None or len(known) != 3:
        return None
    return [(known[1][0], _broadcast([t[1] for t in known]))]


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
    axis = _int_attr(attrs, "axis", -1)
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
    known = _known(ins)
    if known is None or len(known) != 5 or n_out != 1 or _int_attr(
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
    if len(xs) < 3 or _int_attr(attrs, "ceil_mode", 0) != 0:
        return None
    n = len(xs) - 2
    dil = _ints_attr(attrs, "dilations") if use_dilation else None
    if dil is None:
        dil = [1] * n
    strides = _ints_attr(attrs, "strides")
    if strides is None:
        strides = [1] * n
    kernel = _ints_attr(attrs, "kernel_shape")
    if kernel is None:
        if w is None:
            return None
        kernel = list(w[2:])
    pads = _ints_attr(attrs, "pads")
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
    out = _broadcast((la[:-2], lb[:-2]))
    if len(a) != 1:
        out += (la[-2],)
    if len(b) != 1:
        out += (lb[-1],)
    return [(ins[0][0], out)]


def _flatten(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    if x is None:
        return None
    r = len(x[1])
    axis = _int_attr(attrs, "axis", 1)
    if axis < 0:
        axis += r
    if not 0 <= axis <= r:
        return None
    return [(x[0], (math.prod(x[1][:axis]), math.prod(x[1][axis:])))]


def _int64_list(v: np.ndarray | None) -> list[int] | None:
    """A constant's values as ints when it is int64 (what onnx's ParseData
    of int64 accepts), else None."""
    if v is None or v.dtype != np.int64:
        return None
    return cast("list[int]", v.ravel().tolist())


def _reshape(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    if x is None or len(ins) != 2 or ins[1] is None:
        return None
    target = _int64_list(val(1))
    if target is None:
        return None
    allowzero = _int_attr(attrs, "allowzero", 0) if since >= 14 else 0
    if since < 14 and "allowzero" in attrs:
        return None
    out = reshaped(x, target, allowzero)
    return None if out is None else [out]


def reshaped(x: TypedShape, target: Sequence[int], allowzero: int = 0) -> TypedShape | None:
    """``x`` reshaped to ``target`` as onnx's Reshape infers it (a 0 copies
    the input's dim unless ``allowzero``, one -1 takes the rest; None where
    onnx's inference fails)."""
    out = []
    minus = -1
    for i, d in enumerate(target):
        if d == -1:
            if minus >= 0:
                return None
            minus = i
            out.append(-1)
        elif d == 0 and allowzero == 0:
            if i >= len(x[1]):
                return None
            out.append(x[1][i])
        elif d >= 0:
            out.append(d)
        else:
            return None
    if minus >= 0:
        known = math.prod(d for d in out if d != -1)
        total = math.prod(x[1])
        if known == 0 or total % known:
            return None
        out[minus] = total // known
    return x[0], tuple(out)


def _transpose(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    if x is None or not x[1]:
        return None
    r = len(x[1])
    perm = _ints_attr(attrs, "perm")
    if perm is None:
        perm = list(range(r - 1, -1, -1))
    elif not perm or sorted(perm) != list(range(r)):
        return None
    return [(x[0], tuple(x[1][p] for p in perm))]


def _concat(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    known = _known(ins)
    if not known or "axis" not in attrs:
        return None
    r = len(known[0][1])
    axis = attrs["axis"]
    if type(axis) is not int or not -r <= axis < r:
        return None
    if axis < 0:
        axis += r
    first = known[0][1]
    total = 0
    for t in known:
        s = t[1]
        if len(s) != r:
            return None
        for j in range(r):
            if j != axis and s[j] != first[j]:
                return None
        total += s[axis]
    return [(known[0][0], first[:axis] + (total,) + first[axis + 1:])]


def _split(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    if x is None or len(ins) > 2:
        return None
    r = len(x[1])
    axis = _int_attr(attrs, "axis", 0)
    if not -r <= axis < r:
        return None
    if axis < 0:
        axis += r
    dim = x[1][axis]
    has_split = len(ins) == 2 and ins[1] is not None
    if has_split:
        if "num_outputs" in attrs:
            return None
        sizes = _int64_list(val(1))
        if sizes is None or len(sizes) != n_out or sum(sizes) != dim or min(sizes) < 0:
            return None
    elif since < 18 or "num_outputs" not in attrs:
        if since >= 18 or n_out < 1 or dim % n_out:
            return None
        sizes = [dim // n_out] * n_out
    else:
        return None  # num_outputs (uneven chunks): onnx decides
    return [(x[0], x[1][:axis] + (s,) + x[1][axis + 1:]) for s in sizes]


def _slice_bounds(dim: int, start: int, end: int, step: int) -> int:
    """onnx's ``processSliceInputs`` and output length of one sliced axis."""
    if dim == 0:
        return 0
    if start < 0:
        start += dim
    start = min(max(start, 0), dim - 1) if step < 0 else min(max(start, 0), dim)
    if end < 0:
        end += dim
    end = min(max(end, -1), dim - 1) if step < 0 else min(max(end, 0), dim)
    return max(int(math.ceil(1.0 * (end - start) / step)), 0)


def _slice(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    if x is None or not 3 <= len(ins) <= 5 or any(t is None for t in ins[1:3]):
        return None
    data: list[list[int] | None] = []
    for pos in range(1, len(ins)):
        if ins[pos] is None:
            data.append(None)
            continue
        v = val(pos)
        if v is None or v.dtype not in (np.int64, np.int32):
            return None
        data.append(v.ravel().tolist())
    starts, ends = data[0], data[1]
    if starts is None or ends is None:
        return None
    axes = data[2] if len(data) > 2 else None
    steps = data[3] if len(data) > 3 else None
    r = len(x[1])
    if len(starts) != len(ends):
        return None
    if axes is None:
        axes = list(range(len(starts)))
    if len(axes) != len(starts) or any(not -r <= a < r for a in axes):
        return None
    axes = [a + r if a < 0 else a for a in axes]
    if len(set(axes)) != len(axes):
        return None
    if steps is None:
        steps = [1] * len(starts)
    elif len(steps) != len(axes) or 0 in steps:
        return None
    out = list(x[1])
    for a, s, e, st in zip(axes, starts, ends, steps):
        out[a] = _slice_bounds(x[1][a], s, e, st)
    return [(x[0], tuple(out))]


def _gather(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    if len(ins) != 2 or ins[0] is None or ins[1] is None:
        return None
    data, idx = ins[0][1], ins[1][1]
    r = len(data)
    axis = _int_attr(attrs, "axis", 0)
    if r < 1 or not -r <= axis < r:
        return None
    if axis < 0:
        axis += r
    return [(ins[0][0], data[:axis] + idx + data[axis + 1:])]


def _gather_elements(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    if len(ins) != 2 or ins[0] is None or ins[1] is None:
        return None
    return [(ins[0][0], ins[1][1])]


def _axes(val: ValueOf, pos: int, rank: int) -> list[int] | None:
    """Axes from an int64 constant input, checked and made non-negative as
    onnx does (None: absent value, out of range or repeated)."""
    axes = _int64_list(val(pos))
    if axes is None or any(not -rank <= a < rank for a in axes):
        return None
    axes = [a + rank if a < 0 else a for a in axes]
    return axes if len(set(axes)) == len(axes) else None


def _unsqueeze(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    if x is None or len(ins) != 2 or ins[1] is None:
        return None
    r = len(x[1]) + len(_int64_list(val(1)) or ())
    axes = _axes(val, 1, r)
    if axes is None:
        return None
    out = list(x[1])
    for a in sorted(axes):
        out.insert(a, 1)
    return [(x[0], tuple(out))]


def _squeeze(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    if x is None or len(ins) > 2:
        return None
    if len(ins) == 2 and ins[1] is not None:
        axes = _axes(val, 1, len(x[1]))
        if axes is None or any(x[1][a] != 1 for a in axes):
            return None
        return [(x[0], tuple(d for i, d in enumerate(x[1]) if i not in axes))]
    if len(ins) == 2:
        return None
    return [(x[0], tuple(d for d in x[1] if d != 1))]


def _expand(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    if len(ins) != 2 or ins[0] is None or ins[1] is None:
        return None
    target = _int64_list(val(1))
    if target is None or len(ins[1][1]) != 1 or min(target, default=0) < 0:
        return None
    return [(ins[0][0], _broadcast((ins[0][1], tuple(target))))]


def _tile(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    if len(ins) != 2 or ins[0] is None or ins[1] is None or len(ins[1][1]) != 1:
        return None
    reps = _int64_list(val(1))
    x = ins[0][1]
    if reps is None or len(reps) != len(x) or min(reps, default=0) < 0:
        return None
    return [(ins[0][0], tuple(d * k for d, k in zip(x, reps)))]


def _shape_slice(rank: int, attrs: Attrs, since: int) -> tuple[int, int]:
    """Shape's start/end as onnx clamps them (opset 15+)."""
    if since < 15:
        if attrs:
            raise GiveUp("Shape attributes before opset 15")
        return 0, rank
    start = attrs.get("start", 0)
    end = attrs.get("end", rank)
    if type(start) is not int or type(end) is not int:
        raise GiveUp("Shape start/end")
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return start, end


def _shape(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    if x is None:
        return None
    start, end = _shape_slice(len(x[1]), attrs, since)
    return [(INT64, (max(end - start, 0),))]


def _size(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    return None if ins[0] is None else [(INT64, ())]


def _constant_of_shape(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    if len(ins) != 1 or ins[0] is None:
        return None
    shape = _int64_list(val(0))
    if shape is None or len(ins[0][1]) != 1 or min(shape, default=0) < 0:
        return None
    value = attrs.get("value")
    if value is None:
        elem = FLOAT
    elif isinstance(value, onnx.TensorProto):
        elem = value.data_type
    else:
        return None
    return [(elem, tuple(shape))]


def _range(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    known = _known(ins)
    if known is None or len(known) != 3:
        return None
    vals = [v for v in (val(0), val(1), val(2)) if v is not None]
    if len(vals) != 3 or any(v.size != 1 or v.dtype not in (np.int64, np.int32) for v in vals):
        return None
    if len({v.dtype for v in vals}) != 1:
        return None
    start, limit, delta = (int(v.ravel()[0]) for v in vals)
    if delta == 0:
        return None
    n = max(int(math.ceil((limit - start) / delta)), 0)
    return [(known[0][0], (n,))]


#: Rules whose output dims are dims of their inputs (already in range).
_KEEP_DIMS = frozenset({_same, _to_bool, _binary, _compare, _variadic, _where, _cast,
                        _cast_like, _softmax, _dropout, _batchnorm, _layernorm, _transpose,
                        _gather_elements, _gather, _matmul, _gemm, _squeeze, _unsqueeze,
                        _global_pool, _slice})

#: op -> (rule, lowest since_version of the op's schema the rule models).
RULES: dict[str, tuple[Rule, int]] = {
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
    "Gemm": (_gemm, 11), "MatMul": (_matmul, 9), "Flatten": (_flatten, 11),
    "Reshape": (_reshape, 5), "Transpose": (_transpose, 1), "Concat": (_concat, 11),
    "Split": (_split, 13), "Slice": (_slice, 11), "Gather": (_gather, 11),
    "GatherElements": (_gather_elements, 11), "Unsqueeze": (_unsqueeze, 13),
    "Squeeze": (_squeeze, 13), "Expand": (_expand, 8), "Tile": (_tile, 13),
    "Shape": (_shape, 1), "Size": (_size, 1), "ConstantOfShape": (_constant_of_shape, 9),
    "Range": (_range, 11),
    # onnx's schemas give these no shape inference (their functions only): as their input
    "GroupNormalization": (_same, 18), "MeanVarianceNormalization": (_same, 9),
}


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
    if to not in _NP or args[0].dtype not in _ELEM or len(attrs) > 1:
        return None
    return np.asarray(args[0].astype(_NP[to]))


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
        if value.data_type not in _NP or value.data_location == onnx.TensorProto.EXTERNAL:
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


# --------------------------------------------------------------------- the pass
_SCHEMAS: dict[tuple[str, int], Any] = {}


def _schema(op: str, version: int) -> Any:
    """onnx's schema of a standard op at an opset (cached; None if unknown)."""
    key = (op, version)
    if key not in _SCHEMAS:
        try:
            _SCHEMAS[key] = onnx.defs.get_schema(op, version, "")
        except Exception:  # noqa: BLE001 - SchemaError: not a standard op at this opset
            _SCHEMAS[key] = None
    return _SCHEMAS[key]


#: Most rule results kept between passes (emptied when full).
RULE_CACHE_SIZE = 16384
#: (op, attribute key, input types, number of outputs, opset) -> output
#: types, for rules that read no values (:meth:`Propagation.run`).
_RULE_RESULTS: dict[tuple[Any, ...], Sequence["TypedShape | None"]] = {}


def clear_rule_cache() -> None:
    """Empty the rule results kept between passes (they change speed only)."""
    _RULE_RESULTS.clear()


class Propagation:
    """One pass over a model's nodes (see the module docstring).

    Args:
        table: the graph's node table (:mod:`perfseer_rt.graph.nodes`).
        folded: indices of the nodes that fold to constants.
        typed: element type and static shape of every graph input and
            initializer (as the skeleton declares them); filled in place.
        constants: name -> TensorProto of the initializers whose values
            onnx's inference may read (see :func:`value_sources`).
        late: names among ``constants`` that only the per-node completion
            of :func:`perfseer_rt.graph.shapes.infer_shapes` reads.
        model: the model (for per-node onnx inference of other ops).
        opset: the model's default-domain opset.
        domain_rules: ``(domain, op) -> rule or None`` for ops of other
            domains (:func:`perfseer_rt.graph.contrib.contrib_rule`); the
            pass gives up on one without a rule.
    """

    def __init__(self, table: list[Row], folded: set[int], typed: dict[str, TypedShape],
                 constants: dict[str, onnx.TensorProto], late: set[str],
                 model: onnx.ModelProto, opset: int, akeys: list[str | None] | None = None,
                 domain_rules: Callable[[str, str], Rule | None] | None = None):
        self.table = table
        self.domain_rules = domain_rules
        self.akeys = attribute_keys(table) if akeys is None else akeys
        self.folded = folded
        self.shapes = typed
        self.constants = constants
        self.late = late
        self.model = model
        self.opset = opset
        self.values: dict[str, np.ndarray | None] = {}
        self.producer: dict[str, int] = {}
        self.used_late = False

    def run(self, kept: list[int], deadline: Deadline | None) -> dict[str, TypedShape]:
        """Shapes of every tensor the kept nodes touch (GiveUp otherwise)."""
        shapes = self.shapes
        kept_set = set(kept)
        producer = self.producer
        value = self.value
        rules = _rules_at(self.opset)
        akeys = self.akeys
        opset = self.opset
        # A rule that reads no values gives the same result for the same op,
        # attributes, input types and opset: computed once per such
        # signature, in this pass and later ones.
        memo = _RULE_RESULTS
        for k, row in enumerate(self.table):
            if deadline is not None and not k % 4096:
                deadline.check("shape inference")
            op, _, domain, ins, outs, attrs, tensors, _, loose = row
            if loose:
                raise GiveUp("attribute read by presence")
            for o in outs:
                if o:
                    if o in shapes or o in producer:
                        raise GiveUp(f"tensor {o!r} defined twice")
                    producer[o] = k
            if domain:
                domain_rule = self.domain_rules(domain, op) if self.domain_rules else None
                if domain_rule is None:
                    raise GiveUp(f"domain {domain!r}")
                self._domain_node(domain_rule, ins, outs, attrs, shapes)
                continue
            in_types = [shapes.get(i) if i else None for i in ins]
            result: Sequence[TypedShape | None] | None = None
            entry = rules.get(op)
            if entry is None:
                try:
                    entry = rules[op] = _rule_at(op, self.opset)
                except GiveUp:  # no onnx schema: onnxruntime registers a few such ops here
                    domain_rule = self.domain_rules(domain, op) if self.domain_rules else None
                    if domain_rule is None:
                        raise
                    self._domain_node(domain_rule, ins, outs, attrs, shapes)
                    continue
            rule, since = entry
            key = None
            checked = False  # the result's dims are known to be in range
            if rule is not None:
                akey = akeys[k]
                if not tensors and op not in _READS_VALUES and (
                        akey is None or len(akey) <= CACHED_KEY_CHARS):
                    key = (op, akey, tuple(in_types), len(outs), opset)
                    result = memo.get(key)
                    checked = result is not None  # only checked results are kept
                elif op == "Constant" and not attrs and len(tensors) == 1 and len(outs) == 1 \
                        and "value" in tensors:  # _constant's common case, inlined
                    tp = tensors["value"]
                    result = [(tp.data_type, tuple(tp.dims[:]))]
                if result is None:
                    if tensors:
                        attrs = {**attrs, **tensors}
                    try:
                        result = rule(in_types, _getter(value, ins) if op in _READS_VALUES
                                      else _no_values, attrs, len(outs), since)
                    except GiveUp:
                        raise
                    except (IndexError, KeyError, TypeError, ValueError, AttributeError,
                            ZeroDivisionError, OverflowError):
                        result = None  # a malformed node (e.g. no inputs): onnx decides
            if result is None:
                key = None
                result = self._onnx_node(k, op, ins, in_types)
            for o, typed in zip(outs, result):
                if o and typed is not None:
                    if not checked:
                        shape = typed[1]
                        if shape and rule not in _KEEP_DIMS and (
                                min(shape) < 0 or max(shape) >= _MAX_DIM or len(shape) > MAX_RANK):
                            raise GiveUp("dim out of range")
                    shapes[o] = typed
            if key is not None and not checked:
                if len(memo) >= RULE_CACHE_SIZE:
                    memo.clear()
                memo[key] = result
            if k in kept_set:
                for t in ins:
                    if t and t not in shapes:
                        raise GiveUp(f"tensor {t!r} of a kept node unresolved")
                for t in outs:
                    if t and t not in shapes:
                        raise GiveUp(f"tensor {t!r} of a kept node unresolved")
        if self.used_late and not self.folded:
            raise GiveUp("an initializer value onnx's first pass does not read")
        return shapes

    def _domain_node(self, rule: Rule, ins: tuple[str, ...], outs: tuple[str, ...], attrs: Attrs,
                     shapes: dict[str, TypedShape]) -> None:
        """Type the outputs of a node of another domain (its outputs already
        registered) with its rule (GiveUp where the rule cannot: onnx's
        whole-graph inference then decides)."""
        try:
            result = rule([shapes.get(i) if i else None for i in ins], _no_values, attrs,
                          len(outs), 1)
        except (IndexError, KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError,
                OverflowError):
            result = None
        if result is None or len(result) < max((i + 1 for i, o in enumerate(outs) if o), default=0):
            raise GiveUp("a node of another domain its rule cannot type")
        for o, typed in zip(outs, result):
            if o:
                shape = typed[1]
                if shape and (min(shape) < 0 or max(shape) >= _MAX_DIM or len(shape) > MAX_RANK):
                    raise GiveUp("dim out of range")
                shapes[o] = typed
        for t in ins:
            if t and t not in shapes:
                raise GiveUp(f"tensor {t!r} of a kept node unresolved")

    def _onnx_node(self, k: int, op: str, ins: tuple[str, ...],
                   in_types: list[TypedShape | None]) -> list[TypedShape | None]:
        """onnx's inference of one standard node (the rules' fallback)."""
        schema = _schema(op, self.opset)
        if schema is None:
            raise GiveUp(f"no schema for {op}")
        types, data = {}, {}
        for name, typed in zip(ins, in_types):
            if not name:
                continue
            if typed is None:
                return []
            types[name] = onnx.helper.make_tensor_type_proto(typed[0], list(typed[1]))
            v = self.value(name)
            if v is not None:
                data[name] = numpy_helper.from_array(v, name)
        node = self.model.graph.node[k]
        try:
            res = onnx.shape_inference.infer_node_outputs(
                schema, node, types, data, opset_imports=list(self.model.opset_import),
                ir_version=self.model.ir_version)
        except Exception:  # noqa: BLE001 - onnx's inference failed on this node
            return []
        out: list[TypedShape | None] = []
        for o in node.output:
            tp = res.get(o) if o else None
            out.append(static_type(tp) if tp is not None else None)
        return out

    def value(self, name: str) -> np.ndarray | None:
        """The value of a constant tensor, computed on first use (None when
        onnx's inference would not know it either)."""
        values = self.values
        if name in values:
            return values[name]
        stack = [name]
        while stack:
            t = stack[-1]
            if t in values:
                stack.pop()
                continue
            k = self.producer.get(t)
            if k is None or k not in self.folded:
                values[t] = self._initializer_value(t) if k is None else None
                stack.pop()
                continue
            row = self.table[k]
            op, ins = row[0], row[3]
            if op not in ("Shape", "Size", "Constant"):
                pending = [i for i in ins if i and i not in values]
                if pending:
                    if len(stack) > 10_000:
                        return None
                    stack.extend(pending)
                    continue
            stack.pop()
            self._node_value(row)
        return values[name]

    def _initializer_value(self, name: str) -> np.ndarray | None:
        t = self.constants.get(name)
        if t is None:
            return None
        v = tensor_value(t)
        if v is not None and name in self.late:
            self.used_late = True
        return v

    def _node_value(self, row: Row) -> None:
        """Compute (or mark unknown) the values of a folded node's outputs."""
        op, _, _, ins, outs, attrs, tensors = row[:7]
        for o in outs:
            self.values.setdefault(o, None)
        out = self.shapes.get(outs[0]) if len(outs) == 1 and outs[0] else None
        if out is None or math.prod(out[1]) > MAX_CONST_ELEMS:
            return
        val: np.ndarray | None
        try:
            if op == "Constant":
                val = _constant_value(attrs, tensors)
            elif op in ("Shape", "Size"):
                x = self.shapes.get(ins[0]) if ins and ins[0] else None
                if x is None:
                    return
                if op == "Size":
                    val = np.array(math.prod(x[1]), dtype=np.int64)
                else:
                    start, end = _shape_slice(len(x[1]), attrs, _rules_at(self.opset)[op][1])
                    val = np.array(x[1][start:end], dtype=np.int64)
            else:
                fn = VALUES.get(op)
                if (attrs or tensors) and not _known_attrs(op, self.opset).issuperset(
                        (*attrs, *tensors)):
                    return  # onnx's reference evaluator refuses some ops so
                if fn is None or not ins:
                    return
                values = self.values
                args: list[np.ndarray | None] = []
                for i in ins:  # every present input has a value of at most MAX_CONST_ELEMS
                    if not i:
                        args.append(None)
                        continue
                    a = values.get(i)
                    if a is None or a.size > MAX_CONST_ELEMS:
                        return
                    args.append(a)
                if tensors:
                    attrs = {**attrs, **tensors}
                val = fn(args, attrs, out)
        except GiveUp:
            return
        except Exception:  # noqa: BLE001 - this value stays unknown (as for onnx)
            return
        if val is None:
            return
        val = np.asarray(val)
        if _ELEM.get(val.dtype) != out[0] or val.shape != out[1]:
            raise GiveUp(f"value of {outs[0]!r} disagrees with its inferred type")
        self.values[outs[0]] = val


#: Ops whose rules read constant values of their inputs.
_READS_VALUES = frozenset({"Reshape", "Split", "Slice", "Unsqueeze", "Squeeze", "Expand", "Tile",
                           "ConstantOfShape", "Range"})


def _no_values(pos: int) -> np.ndarray | None:
    """The value getter of rules that read no values (_READS_VALUES lists
    the others); should one ever ask, onnx decides."""
    raise GiveUp("a rule outside _READS_VALUES asked for a value")


def _getter(value: Callable[[str], np.ndarray | None], ins: tuple[str, ...]) -> ValueOf:
    """A rule's value getter by input position."""
    def val(pos: int) -> np.ndarray | None:
        return value(ins[pos])
    return val


_KNOWN_ATTRS: dict[tuple[str, int], frozenset[str]] = {}
_ATTR_TYPES: dict[tuple[str, int], dict[str, int]] = {}


def schema_attribute_types(op: str, opset: int) -> dict[str, int]:
    """Each attribute onnx's schema of standard op ``op`` declares at
    ``opset``, with its type (``onnx.AttributeProto.AttributeType`` values;
    empty where there is no such op); cached per process."""
    key = (op, opset)
    found = _ATTR_TYPES.get(key)
    if found is None:
        schema = _schema(op, opset)
        found = _ATTR_TYPES[key] = {n: int(a.type.value) for n, a in schema.attributes.items()} \
            if schema else {}
    return found


def schema_attributes(op: str, opset: int) -> frozenset[str] | None:
    """The attribute names onnx's schema of standard op ``op`` declares at
    ``opset`` (None: no such op there)."""
    schema = _schema(op, opset)
    return None if schema is None else _known_attrs(op, opset)


def _known_attrs(op: str, opset: int) -> frozenset[str]:
    """The attribute names onnx's schema of ``op`` declares (a value is
    computed only for nodes without others: onnx's reference evaluator
    refuses unknown attributes on some ops)."""
    key = (op, opset)
    found = _KNOWN_ATTRS.get(key)
    if found is None:
        schema = _schema(op, opset)
        found = _KNOWN_ATTRS[key] = frozenset(schema.attributes) if schema else frozenset()
    return found


_RULES_AT: dict[int, dict[str, tuple[Rule | None, int]]] = {}


def _rules_at(opset: int) -> dict[str, tuple[Rule | None, int]]:
    """op -> (rule or None, the op's schema since_version) at an opset,
    filled as ops are met (cached per process)."""
    return _RULES_AT.setdefault(opset, {})


def _rule_at(op: str, opset: int) -> tuple[Rule | None, int]:
    if op == "Constant":
        return _constant, 1
    schema = _schema(op, opset)
    if schema is None:
        raise GiveUp(f"no schema for {op} at opset {opset}")
    entry = RULES.get(op)
    if entry is None or schema.since_version < entry[1]:
        return None, schema.since_version
    return entry[0], schema.since_version


def _constant(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    if n_out != 1 or len(attrs) != 1:
        return None
    (name, v), = attrs.items()
    if name == "value" and isinstance(v, onnx.TensorProto):
        return [(v.data_type, tuple(v.dims[:]))]
    if name == "value_int" and type(v) is int:
        return [(INT64, ())]
    if name == "value_ints" and type(v) is list:
        return [(INT64, (len(v),))]
    if name == "value_float" and type(v) is float:
        return [(FLOAT, ())]
    if name == "value_floats" and type(v) is list:
        return [(FLOAT, (len(v),))]
    return None


def _constant_value(attrs: Attrs, tensors: dict[str, onnx.TensorProto]) -> np.ndarray | None:
    if len(attrs) + len(tensors) != 1:
        return None
    if tensors:
        t = tensors.get("value")
        return None if t is None or t.data_type not in _NP else tensor_value(t)
    (name, v), = attrs.items()
    if name in ("value_int", "value_ints"):
        return np.array(v, dtype=np.int64)
    return None


def tensor_value(t: onnx.TensorProto) -> np.ndarray | None:
    """The value of a TensorProto with data in the file (None: external or
    undecodable data), as ``numpy_helper.to_array`` gives it; raw data of the
    plain numeric types without its overhead."""
    if t.data_location == onnx.TensorProto.EXTERNAL:
        return None
    try:
        dtype = _NP.get(t.data_type)
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
