"""Export a fitted learned layer for the runtime (:mod:`perfseer_rt.gpu.learned`):
``learned.onnx`` (features ``float32[K, F]`` -> ``g`` ``float32[K]``) and
``learned.json`` (format, feature version and names, launch cost, host
scale, provenance, training summary, held-out accuracy), written
atomically.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import torch

from perfseer_rt.gpu import learned as L
from perfseer_rt.gpu import learned_features as LF
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.gpulearned.model import StepModel

ONNX_FILE = "learned.onnx"


def onnx_bytes(model: StepModel) -> bytes:
    """The kernel MLP as ONNX (float32, dynamic kernel count)."""
    mlp = model.mlp.float().eval()
    buf = io.BytesIO()
    x = torch.zeros(4, len(LF.names()))
    torch.onnx.export(mlp, (x,), buf, dynamo=False, opset_version=17, input_names=["features"],  # type: ignore[arg-type]
                      output_names=["g"], dynamic_axes={"features": {0: "k"}, "g": {0: "k"}})
    model.double()
    return buf.getvalue()


def export(model: StepModel, folder: Path, summary: dict[str, Any]) -> None:
    """Write ``folder/learned.onnx`` and ``folder/learned.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(folder / ONNX_FILE, onnx_bytes(model))
    doc = {"format": L.FORMAT, "feature_version": LF.FEATURE_VERSION, "file": ONNX_FILE,
           "features": LF.names(),
           "launch_ms": float(torch.exp(model.log_launch_ms)),
           "host_scale": float(torch.exp(model.log_host_scale)), **summary}
    atomic_write_bytes(folder / "learned.json", (json.dumps(doc, indent=1) + "\n").encode())
