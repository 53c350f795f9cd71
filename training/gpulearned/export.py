"""Export fitted learned layers for the runtime (:mod:`perfseer_rt.gpu.learned`):
one ONNX file per distinct fitted model (features ``float32[K, F]`` -> ``g``
``float32[K]``; ``learned.onnx`` when both modes share one, else
``learned-<mode>.onnx``) and ``learned.json`` (format, feature version and
names the layers read (in column order), each mode's file, launch cost and host scale, provenance, training
summary, held-out accuracy), written atomically.
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
    mlp = model.mlp.eval()
    buf = io.BytesIO()
    x = torch.zeros(4, len(model.columns))
    torch.onnx.export(mlp, (x,), buf, dynamo=False, opset_version=17, input_names=["features"],  # type: ignore[arg-type]
                      output_names=["g"], dynamic_axes={"features": {0: "k"}, "g": {0: "k"}})
    return buf.getvalue()


def export(models: dict[str, StepModel], folder: Path, summary: dict[str, Any]) -> None:
    """Write each mode's layer of ``models`` (mode -> model; modes may share
    one) and ``folder/learned.json``."""
    inputs = {tuple(m.columns) for m in models.values()}
    if len(inputs) != 1 or max(next(iter(inputs))) >= len(LF.names()):
        raise ValueError("the modes' layers must read the same named feature columns")
    names = LF.names()
    features = [names[i] for i in next(iter(inputs))]
    folder.mkdir(parents=True, exist_ok=True)
    shared = len({id(m) for m in models.values()}) == 1
    layers: dict[str, dict[str, Any]] = {}
    for mode in L.MODES:
        model = models[mode]
        name = ONNX_FILE if shared else f"learned-{mode}.onnx"
        if not any(e["file"] == name for e in layers.values()):
            atomic_write_bytes(folder / name, onnx_bytes(model))
        layers[mode] = {"file": name, "launch_ms": float(torch.exp(model.log_launch_ms.detach())),
                        "host_scale": float(torch.exp(model.log_host_scale.detach()))}
    for stale in folder.glob("learned*.onnx"):
        if stale.name not in {e["file"] for e in layers.values()}:
            stale.unlink()
    doc = {"format": L.FORMAT, "feature_version": LF.FEATURE_VERSION, "features": features,
           "layers": layers, **summary}
    atomic_write_bytes(folder / "learned.json", (json.dumps(doc, indent=1) + "\n").encode())
