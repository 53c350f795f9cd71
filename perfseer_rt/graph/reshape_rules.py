"""Shape rules of the Python shape pass (:mod:`perfseer_rt.graph.propagate`)
for the ops that move data or compute shapes: Flatten, Reshape, Transpose,
Concat, Split, Slice, Gather, (Un)squeeze, Expand, Tile, Shape, Size,
ConstantOfShape and Range. Rules that need an input's value (a Reshape
target, Slice bounds, axes) read it through the rule's value getter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import numpy as np
import onnx

from perfseer_rt.graph.nodes import Attrs
from perfseer_rt.graph.shape_rules import (
    FLOAT,
    INT64,
    GiveUp,
    Result,
    Rule,
    TypedShape,
    Types,
    ValueOf,
    broadcast,
    int_attr,
    ints_attr,
    known_types,
)


def _flatten(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = ins[0]
    if x is None:
        return None
    r = len(x[1])
    axis = int_attr(attrs, "axis", 1)
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
    allowzero = int_attr(attrs, "allowzero", 0) if since >= 14 else 0
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
    perm = ints_attr(attrs, "perm")
    if perm is None:
        perm = list(range(r - 1, -1, -1))
    elif not perm or sorted(perm) != list(range(r)):
        return None
    return [(x[0], tuple(x[1][p] for p in perm))]


def _concat(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    known = known_types(ins)
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
    axis = int_attr(attrs, "axis", 0)
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
    axis = int_attr(attrs, "axis", 0)
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
    return [(ins[0][0], broadcast((ins[0][1], tuple(target))))]


def _tile(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    if len(ins) != 2 or ins[0] is None or ins[1] is None or len(ins[1][1]) != 1:
        return None
    reps = _int64_list(val(1))
    x = ins[0][1]
    if reps is None or len(reps) != len(x) or min(reps, default=0) < 0:
        return None
    return [(ins[0][0], tuple(d * k for d, k in zip(x, reps)))]


def shape_slice(rank: int, attrs: Attrs, since: int) -> tuple[int, int]:
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
    start, end = shape_slice(len(x[1]), attrs, since)
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
    known = known_types(ins)
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
MOVEMENT_KEEP_DIMS = frozenset({_transpose, _gather_elements, _gather, _squeeze, _unsqueeze,
                                _slice})

#: op -> (rule, lowest since_version of the op's schema the rule models).
MOVEMENT_RULES: dict[str, tuple[Rule, int]] = {
    "Flatten": (_flatten, 11),
    "Reshape": (_reshape, 5), "Transpose": (_transpose, 1), "Concat": (_concat, 11),
    "Split": (_split, 13), "Slice": (_slice, 11), "Gather": (_gather, 11),
    "GatherElements": (_gather_elements, 11), "Unsqueeze": (_unsqueeze, 13),
    "Squeeze": (_squeeze, 13), "Expand": (_expand, 8), "Tile": (_tile, 13),
    "Shape": (_shape, 1), "Size": (_size, 1), "ConstantOfShape": (_constant_of_shape, 9),
    "Range": (_range, 11),
}
