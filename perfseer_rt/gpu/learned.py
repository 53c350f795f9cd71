"""The learned whole-model layer at run time (``exported_models/_gpu_learned``):
``learned.onnx`` maps each kernel's features (:mod:`perfseer_rt.gpu.learned_features`)
to ``g = log(kernel ms / roofline ms)``; ``learned.json`` holds the launch
cost (ms per launch), the host scale, the feature names and the layer's
training summary and held-out accuracy. Trained by ``python -m
training.gpulearned`` on whole-model latencies measured by others.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from perfseer_rt.errors import DeviceError
from perfseer_rt.gpu import learned_features as LF
from perfseer_rt.gpu.kernel_table import KernelTable
from perfseer_rt.gpu.specs import GpuSpec

FORMAT = "perfseer-rt-gpu-learned/1"


@dataclass(frozen=True)
class LearnedLayer:
    """The exported layer: its ONNX file and its JSON document."""

    folder: Path
    doc: dict[str, Any]

    @property
    def launch_ms(self) -> float:
        return float(self.doc["launch_ms"])

    @property
    def host_scale(self) -> float:
        return float(self.doc["host_scale"])

    def kernel_ms(self, table: KernelTable, spec: GpuSpec, layout: str, half: bool) -> np.ndarray:
        """ms of every kernel of ``table`` on ``spec``: its roofline times
        ``exp(g)`` plus the launch cost of its launches."""
        if not len(table):
            return np.zeros(0)
        x = LF.features(table, spec, layout, half)
        g = _session(str(self.folder / self.doc["file"])).run(None, {"features": x})[0]
        t_c, t_m = LF.roofline_ms(table, spec)
        roof = np.maximum(np.maximum(t_c, t_m), 1e-6)
        return np.asarray(roof * np.exp(g.astype(np.float64)) + self.launch_ms * table["launches"])


@lru_cache(maxsize=4)
def _session(path: str) -> Any:
    import onnxruntime as ort  # lazy: only a GPU prediction needs it

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


@lru_cache(maxsize=4)
def load_learned(folder: str) -> LearnedLayer:
    """The layer in ``folder`` (``learned.json`` + its ONNX file).

    Raises:
        DeviceError: missing, or another format or feature version.
    """
    path = Path(folder) / "learned.json"
    if not path.is_file():
        raise DeviceError(f"the learned GPU layer is not installed ({path} missing); "
                          "run `python -m training.gpulearned export`")
    doc = json.loads(path.read_text())
    if doc.get("format") != FORMAT or doc.get("feature_version") != LF.FEATURE_VERSION:
        raise DeviceError(f"{path}: format {doc.get('format')!r} / features {doc.get('feature_version')!r}; "
                          f"this perfseer-rt reads {FORMAT!r} / {LF.FEATURE_VERSION!r}")
    return LearnedLayer(Path(folder), doc)
