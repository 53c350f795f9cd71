"""Rewrite an ONNX file structure-only (big tensors become dangling external data)."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx.external_data_helper as ext


def strip_file(path: Path, size_threshold: int = 1024) -> None:
    """Rewrite ``path`` structure-only: tensors of >= ``size_threshold`` bytes
    become dangling external references (dims kept, data dropped).

    Fallback for zoo versions whose ``export_onnx(structure_only=True)`` fails
    on onnx >= 1.2x ("does not have raw_data field": the raw data was cleared
    before ``set_external_data`` was called).
    """
    proto = onnx.load(str(path))
    offset = 0
    tensors = list(proto.graph.initializer)
    for node in proto.graph.node:
        tensors += [a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]
    for t in tensors:
        if not t.HasField("raw_data") or len(t.raw_data) < size_threshold:
            continue
        size = len(t.raw_data)
        ext.set_external_data(t, path.name + ".data", offset, size)
        t.ClearField("raw_data")
        offset += size
    onnx.save_model(proto, str(path))
