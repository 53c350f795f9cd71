"""ONNX element types and their byte sizes: the one table extraction uses.

Sub-byte types (``INT4``/``UINT4``/``FLOAT4E2M1``: 0.5 B, ``INT2``/``UINT2``:
0.25 B, 6-bit floats: 0.75 B) have fractional sizes, as packed on disk.
``STRING`` has no fixed size and ``UNDEFINED`` (0) none at all: both are
refused with :class:`~perfseer_rt.errors.GraphError`, as is any number not in
the table.
"""

from __future__ import annotations

from perfseer_rt.errors import GraphError

#: ONNX TensorProto.DataType number -> (name, bytes per element).
DTYPES: dict[int, tuple[str, float]] = {
    1: ("float32", 4), 2: ("uint8", 1), 3: ("int8", 1), 4: ("uint16", 2),
    5: ("int16", 2), 6: ("int32", 4), 7: ("int64", 8), 9: ("bool", 1),
    10: ("float16", 2), 11: ("float64", 8), 12: ("uint32", 4), 13: ("uint64", 8),
    14: ("complex64", 8), 15: ("complex128", 16), 16: ("bfloat16", 2),
    17: ("float8e4m3fn", 1), 18: ("float8e4m3fnuz", 1), 19: ("float8e5m2", 1),
    20: ("float8e5m2fnuz", 1), 21: ("uint4", 0.5), 22: ("int4", 0.5),
    23: ("float4e2m1", 0.5), 24: ("float8e8m0", 1), 25: ("uint2", 0.25),
    26: ("int2", 0.25), 27: ("float6e2m3", 0.75), 28: ("float6e3m2", 0.75),
}

#: Floating-point compute types (what a model "is" for the dtype warning).
FLOAT_TYPES = frozenset({1, 10, 11, 16, 17, 18, 19, 20, 23, 24, 27, 28})
#: Integer types that quantized models compute in.
QUANT_TYPES = frozenset({2, 3, 21, 22, 25, 26})
#: Their names (weights stored so in a float model: quantized weight-only).
QUANT_NAMES = frozenset(DTYPES[t][0] for t in QUANT_TYPES)
#: Names of the types narrower than float32 that a float32 model may store
#: its weights in and convert as it runs: the quantized integers, float16,
#: bfloat16 and the 8-, 6- and 4-bit floats.
NARROW_WEIGHT_NAMES = QUANT_NAMES | frozenset(DTYPES[t][0] for t in FLOAT_TYPES - {1, 11})


def itemsize(elem_type: int, what: str = "a tensor") -> float:
    """Bytes per element of ``elem_type``.

    Raises:
        GraphError: UNDEFINED, STRING or an unknown type number, naming ``what``.
    """
    entry = DTYPES.get(elem_type)
    if entry is None:
        if elem_type == 0:
            raise GraphError(f"{what} has no element type (UNDEFINED)")
        if elem_type == 8:
            raise GraphError(f"{what} is a STRING tensor; string tensors have no "
                             "fixed size and are not supported")
        raise GraphError(f"{what} has an unknown element type {elem_type}")
    return entry[1]


def dtype_name(elem_type: int) -> str:
    entry = DTYPES.get(elem_type)
    return entry[0] if entry else f"type{elem_type}"
