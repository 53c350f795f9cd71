"""The learned whole-model layer at run time (``exported_models/_gpu_learned``):
for each mode (``inference``, ``train``) an ONNX file maps each kernel's
features (:mod:`perfseer_rt.gpu.learned_features`) to ``g = log(kernel ms /
roofline ms)``; ``learned.json`` names each mode's file with its launch cost
(ms per launch) and host scale (both modes may share one file), and holds
the names of the features it reads (a subset of them, in order) and the layer's training summary and held-out accuracy.
Trained by ``python -m training.gpulearned`` on whole-model latencies
measured by others.
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

FORMAT = "perfseer-rt-gpu-learned/2"
#: The modes a layer answers, each from its own entry of ``layers``.
MODES = ("inference", "train")


@dataclass(frozen=True)
class LearnedLayer:
    """The exported layer: its folder and its JSON document."""

    folder: Path
    doc: dict[str, Any]
    #: the columns of :func:`perfseer_rt.gpu.learned_features.features` the
    #: layer files read (``doc["features"]``, by name), in order
    columns: tuple[int, ...]

    def entry(self, mode: str) -> dict[str, Any]:
        """``mode``'s file, launch cost (ms per launch) and host scale."""
        layers: dict[str, dict[str, Any]] = self.doc["layers"]
        if mode not in layers:
            raise DeviceError(f"the learned GPU layer has no {mode!r} layer (it has {', '.join(layers)})")
        return layers[mode]

    def launch_ms(self, mode: str) -> float:
        return float(self.entry(mode)["launch_ms"])

    def host_scale(self, mode: str) -> float:
        return float(self.entry(mode)["host_scale"])

    def kernel_ms(self, table: KernelTable, spec: GpuSpec, layout: str, half: bool,
                  mode: str = "inference") -> np.ndarray:
        """ms of every kernel of ``table`` on ``spec`` by ``mode``'s layer: its
        roofline times ``exp(g)`` plus the launch cost of its launches."""
        if not len(table):
            return np.zeros(0)
        x = np.ascontiguousarray(LF.features(table, spec, layout, half)[:, self.columns])
        g = _session(str(self.folder / self.entry(mode)["file"])).run(None, {"features": x})[0]
        t_c, t_m = LF.roofline_ms(table, spec)
        roof = np.maximum(np.maximum(t_c, t_m), 1e-6)
        return np.asarray(roof * np.exp(g.astype(np.float64)) + self.launch_ms(mode) * table["launches"])


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
    layers = doc.get("layers")
    if not isinstance(layers, dict) or any(m not in layers or not (Path(folder) / str(layers[m].get("file", "")))
                                           .is_file() for m in MODES):
        raise DeviceError(f"{path}: expected a layer file for each of {', '.join(MODES)}; "
                          "run `python -m training.gpulearned export`")
    names = LF.names()
    features = doc.get("features")
    if not isinstance(features, list) or not features or any(f not in names for f in features):
        raise DeviceError(f"{path}: 'features' must name columns of {LF.FEATURE_VERSION!r} "
                          f"({', '.join(names)}); got {features!r}")
    return LearnedLayer(Path(folder), doc, tuple(names.index(f) for f in features))
