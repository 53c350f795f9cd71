"""Loading ONNX models from a path, bytes or a ModelProto, without weights.

External data is never read: a structure-only model (weights stored as
external data that is absent) loads like any other, since extraction needs
only the initializers' dims.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeAlias

import onnx
from google.protobuf.message import DecodeError

from perfseer_rt.errors import ModelLoadError
from perfseer_rt.model_file import check_model_file

#: What extraction accepts as a model.
ModelSource: TypeAlias = "str | os.PathLike[str] | bytes | bytearray | memoryview | onnx.ModelProto"


def load_model(source: ModelSource) -> tuple[onnx.ModelProto, str]:
    """Parse ``source`` into a ModelProto; returns it with a display name.

    Raises:
        ModelLoadError: missing file, a directory, something that is not a
            regular file (a pipe, a device), a file that is not ONNX, or a
            truncated/corrupt ONNX file.
    """
    if isinstance(source, onnx.ModelProto):
        _check_model(source, "<ModelProto>")
        return source, "<ModelProto>"
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _parse(bytes(source), "<bytes>"), "<bytes>"
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        check_model_file(path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ModelLoadError(f"{path}: cannot read: {exc.strerror}") from None
        return _parse(data, str(path)), str(path)
    raise ModelLoadError(
        f"cannot load a model from {type(source).__name__}; pass a path, bytes or onnx.ModelProto")


def _parse(data: bytes, name: str) -> onnx.ModelProto:
    if not data:
        raise ModelLoadError(f"{name}: empty file, not an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        if _looks_like_onnx(data):
            raise ModelLoadError(
                f"{name}: truncated or corrupt ONNX file ({len(data)} bytes could not be "
                "parsed); re-export or re-download it") from None
        raise ModelLoadError(f"{name}: not an ONNX model (protobuf parse failed)") from None
    _check_model(model, name)
    return model


def _check_model(model: onnx.ModelProto, name: str) -> None:
    """Reject parses that succeeded on something that is not a whole model."""
    if not model.HasField("graph") or (model.ir_version == 0 and not model.opset_import):
        raise ModelLoadError(f"{name}: not an ONNX model (no graph found)")
    if not model.opset_import:
        # opset_import is written after the graph: a file cut at a field
        # boundary parses but has lost it.
        raise ModelLoadError(f"{name}: truncated or corrupt ONNX file (no opset_import)")
    if len(model.graph.node) == 0:
        raise ModelLoadError(f"{name}: the ONNX graph has no nodes")


def _looks_like_onnx(data: bytes) -> bool:
    """ONNX files start with field 1 (ir_version, varint): tag byte 0x08."""
    return data[:1] == b"\x08" and len(data) > 1 and 0 < data[1] < 32
