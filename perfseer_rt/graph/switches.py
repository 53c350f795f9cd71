"""Graph inputs that switch the model's path rather than carry data.

optimum's merged decoders take ``use_cache_branch: bool[1]``, the condition
of an If whose branches are the decoder without its KV cache (a prompt) and
with it (one decode step): which one runs is the caller's choice, not a
shape. Such an input, named in ``dims`` (``--dim use_cache_branch=1``),
becomes a constant of that value, so that the If's condition is known and
extraction takes that branch (its shapes, its cost, and its nodes where it
does most of the work). A switch is a graph input of a boolean or integer
type with a static shape of at most :data:`MAX_SWITCH_ELEMS` elements; every
element takes the value (a bool: true when it is not 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from perfseer_rt.errors import ShapeError

#: Most elements a switch input holds.
MAX_SWITCH_ELEMS = 8
#: Element types a switch may have (bool and the integer types).
_SWITCH_TYPES: dict[int, type] = {onnx.TensorProto.BOOL: np.bool_, onnx.TensorProto.INT8: np.int8,
                 onnx.TensorProto.INT16: np.int16, onnx.TensorProto.INT32: np.int32,
                 onnx.TensorProto.INT64: np.int64, onnx.TensorProto.UINT8: np.uint8}


def switch_shape(vi: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    """The static shape of a graph input that can be a switch, else None."""
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or tt.elem_type not in _SWITCH_TYPES \
            or not tt.HasField("shape"):
        return None
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
    if any(d < 1 for d in dims) or math.prod(dims) > MAX_SWITCH_ELEMS:
        return None
    return tuple(dims)


def named_switches(proto: onnx.ModelProto, dims: Mapping[str, int] | None
                   ) -> dict[str, tuple[int, int]]:
    """The switch inputs ``dims`` names: name -> (element type, value)."""
    if not dims:
        return {}
    inits = {t.name for t in proto.graph.initializer}
    return {vi.name: (vi.type.tensor_type.elem_type, dims[vi.name]) for vi in proto.graph.input
            if vi.name in dims and vi.name not in inits and switch_shape(vi) is not None}


def fix_switches(proto: onnx.ModelProto, dims: Mapping[str, int] | None) -> onnx.ModelProto:
    """``proto`` with each switch input named in ``dims`` replaced by a
    constant of its value (``proto`` itself when none is named).

    Raises:
        ShapeError: a value outside the switch's element type.
    """
    switches = named_switches(proto, dims)
    if not switches:
        return proto
    named = [vi for vi in proto.graph.input if vi.name in switches]
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for vi in named:
        elem, value = switches[vi.name]
        dtype = _SWITCH_TYPES[elem]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ShapeError(f"--dim {vi.name}: {value!r} is not an integer")
        if dtype is not np.bool_ and not np.iinfo(dtype).min <= int(value) <= np.iinfo(dtype).max:
            raise ShapeError(f"--dim {vi.name}: {value} does not fit the input's "
                             f"{np.dtype(dtype).name}")
        array: np.ndarray = np.full(switch_shape(vi) or (), value, dtype=dtype)
        out.graph.initializer.append(numpy_helper.from_array(array, vi.name))
    kept = [vi for vi in out.graph.input if vi.name not in {v.name for v in named}]
    del out.graph.input[:]
    out.graph.input.extend(kept)
    if out.ir_version < 4:  # an initializer that is not an input needs IR 4
        out.ir_version = 4
    return out
