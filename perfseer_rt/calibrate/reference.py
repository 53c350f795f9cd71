"""The bundled reference models that calibration profiles.

``reference/index.json`` lists structure-only ONNX files (weights stripped:
every tensor of >= 1 KiB is a dangling external-data reference, dims kept),
exported by ``python -m training.byod.reference_set``. :func:`materialize`
fills those tensors with random values so that onnxruntime can run the model;
timing does not depend on the weight values (floats are drawn from
[-0.1, 0.1): no denormals, no NaN; integer tensors are zeros, valid as indices).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from perfseer_rt.errors import ModelLoadError


@dataclass(frozen=True)
class Reference:
    """One reference model: its name, ONNX file, zoo spec and batch size."""

    name: str
    path: Path
    spec: str
    batch: int


def reference_dir() -> Path:
    return Path(str(resources.files("perfseer_rt.calibrate") / "reference"))


def references(root: Path | None = None) -> list[Reference]:
    """The bundled set, smallest first (``index.json`` order)."""
    root = root or reference_dir()
    doc = json.loads((root / "index.json").read_text())
    return [Reference(m["name"], root / m["file"], m["spec"], int(m["batch"])) for m in doc["models"]]


def _fill(tensor: onnx.TensorProto, rng: np.random.Generator) -> None:
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
    shape = tuple(tensor.dims)
    if np.issubdtype(dtype, np.floating):
        arr = rng.uniform(-0.1, 0.1, size=shape).astype(dtype)
    else:
        arr = np.zeros(shape, dtype=dtype)
    filled = numpy_helper.from_array(arr, tensor.name)
    tensor.ClearField("external_data")
    tensor.data_location = onnx.TensorProto.DEFAULT
    tensor.raw_data = filled.raw_data


def materialize(path: str | Path, seed: int = 0) -> bytes:
    """The serialized model with every external tensor filled in (see the module doc).

    Raises:
        ModelLoadError: the file cannot be read as ONNX.
    """
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise ModelLoadError(f"cannot read reference model {str(path)!r}: {exc}") from None
    rng = np.random.default_rng(seed)
    tensors = list(proto.graph.initializer)
    for node in proto.graph.node:
        tensors += [a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]
    for t in tensors:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            _fill(t, rng)
    return bytes(proto.SerializeToString())
