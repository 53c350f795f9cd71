"""Input tensors for a measurement, built from the session's input signature.

Dynamic dims are resolved as in PerfGraph extraction: an explicit shape for
the input wins; otherwise the first dim is the batch size; any other dynamic
dim is a :class:`ShapeError` that names the input and the dim and says which
option fixes it. Values are random but valid: floats uniform in [0, 1),
integer inputs (token ids, indices) in 0..99 since the vocabulary size is not
known, booleans True, and an integer input named like a mask
(``attention_mask``: "mask" in its name) all ones, every position attended
(a random mask is a sequence length out of range for models that sum it,
as onnxruntime-genai's do).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from perfseer_rt.errors import ShapeError

# onnxruntime type strings -> numpy dtypes
_DTYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16,
    "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32, "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_,
}

INT_HIGH = 100  # integer inputs are drawn from 0..INT_HIGH-1


def _is_static(d: Any) -> bool:
    return isinstance(d, int) and d > 0


def resolve_shapes(signature: Iterable[tuple[str, Sequence[Any]]], batch: int | None = None,
                   input_shapes: Mapping[str, Sequence[int]] | None = None
                   ) -> dict[str, tuple[int, ...]]:
    """Concrete shapes for ``(name, dims)`` pairs (dims: int, str or None).

    Raises:
        ShapeError: an unknown name in ``input_shapes``, a rank or static-dim
            mismatch, a fixed batch dim that differs from ``batch``, or a
            dynamic dim nothing resolves.
    """
    given = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
    sig = list(signature)
    names = [n for n, _ in sig]
    unknown = set(given) - set(names)
    if unknown:
        raise ShapeError(f"--input names {sorted(unknown)} are not inputs of the model; "
                         f"its inputs are {names}")
    shapes: dict[str, tuple[int, ...]] = {}
    for name, dims in sig:
        dims = list(dims)
        if name in given:
            shape = given[name]
            if len(shape) != len(dims):
                raise ShapeError(f"input {name!r} has rank {len(dims)} ({_fmt(dims)}) but "
                                 f"--input gave {len(shape)} dims {_fmt(shape)}")
            for i, (d, s) in enumerate(zip(dims, shape)):
                if _is_static(d) and d != s:
                    raise ShapeError(f"input {name!r} dim {i} is fixed to {d} in the model but "
                                     f"--input gave {s}")
            shapes[name] = shape
            continue
        out = []
        for i, d in enumerate(dims):
            if _is_static(d):
                if i == 0 and batch is not None and d != batch and len(dims) > 1:
                    raise ShapeError(f"input {name!r} has a fixed batch dim of {d}; --batch "
                                     f"{batch} cannot apply (export the model with a dynamic "
                                     "batch dim, or drop --batch)")
                out.append(d)
            elif i == 0 and batch is not None:
                out.append(batch)
            else:
                label = f" ({d!r})" if isinstance(d, str) and d else ""
                hint = "give --batch N or " if i == 0 else "give "
                raise ShapeError(f"input {name!r} dim {i}{label} is dynamic and unresolved: "
                                 f"{hint}--input {name}:{_example(dims, batch)}")
        shapes[name] = tuple(out)
    return shapes


def _fmt(dims: Sequence[Any]) -> str:
    return "x".join(str(d) if d not in (None, "") else "?" for d in dims)


def _example(dims: Sequence[Any], batch: int | None) -> str:
    parts = []
    for i, d in enumerate(dims):
        if _is_static(d):
            parts.append(str(d))
        elif i == 0 and batch is not None:
            parts.append(str(batch))
        else:
            parts.append("N")
    return "x".join(parts)


def numpy_dtype(type_str: str) -> np.dtype:
    """The numpy dtype for an onnxruntime input type such as ``tensor(float)``."""
    try:
        return np.dtype(_DTYPES[type_str])
    except KeyError:
        raise ShapeError(f"input type {type_str!r} is not supported for generated inputs; "
                         f"supported: {', '.join(sorted(_DTYPES))}") from None


def random_tensor(shape: Sequence[int], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """A tensor of valid values: floats in [0, 1), integers in 0..99, booleans True."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.ones(shape, dtype=np.bool_)
    if np.issubdtype(dtype, np.integer):
        high = min(INT_HIGH, int(np.iinfo(dtype).max) + 1)
        return rng.integers(0, high, size=shape, dtype=dtype)
    return rng.random(size=shape, dtype=np.float32).astype(dtype, copy=False)


def make_inputs(session: Any, batch: int | None = None,
                input_shapes: Mapping[str, Sequence[int]] | None = None,
                seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for every input of an onnxruntime session."""
    metas = session.get_inputs()
    shapes = resolve_shapes(((m.name, m.shape) for m in metas), batch, input_shapes)
    rng = np.random.default_rng(seed)
    feeds = {}
    for m in metas:
        dtype = numpy_dtype(m.type)
        if "mask" in m.name.lower() and np.issubdtype(dtype, np.integer):
            feeds[m.name] = np.ones(shapes[m.name], dtype=dtype)
        else:
            feeds[m.name] = random_tensor(shapes[m.name], dtype, rng)
    return feeds
