"""The exported prior (``exported_models/_gpu_prior``): per-family ONNX
models (``features`` -> ``log_ratio``) and ``prior.json``, run with
onnxruntime on the CPU.

Per kernel: ``k = mlp^w * additive^(1-w)`` (``mlp = roofline *
exp(log_ratio)``, ``additive`` the family's kernel-additive fit, ``w`` =
``blend_w_mlp``), then ``t = max(k - a, roofline) + launch``, where ``a`` is
the fixed per-call cost fitted in the measurements (PyTorch
eager, kernel-additive intercept of the family) and ``launch`` the device
entry's per-kernel overhead for our runtime (an assumption it states).
Kernels smaller than anything the family was trained on (fewer bytes than
its smallest row) use the family's kernel-additive fit instead of the MLP,
which would extrapolate there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from perfseer_rt.errors import DeviceError
from perfseer_rt.gpu import features as F

PRIOR_FORMAT = "perfseer-rt-gpu-prior/1"
PROVENANCE = ("prior from public kernel measurements, PyTorch 2.1 fp32 (NeuSight); "
              "not measured by us")
#: Family whose achieved bandwidth prices the "memory" (everything else) kernels.
MEMORY_FAMILY = "elem"


@dataclass(frozen=True)
class Prior:
    folder: Path
    doc: dict[str, Any]

    @property
    def families(self) -> dict[str, Any]:
        families: dict[str, Any] = self.doc["families"]
        return families

    def kernel_ms(self, family: str, shape: dict[str, np.ndarray], spec: dict[str, np.ndarray],
                  launch_ms: float) -> np.ndarray:
        """Predicted ms of ``n`` kernels of ``family`` (``memory`` included)."""
        flops, nbytes = shape["flops"], shape["bytes"]
        roof = F.roofline_ms(flops, nbytes, spec)
        if family == "memory":
            coef = self.families[MEMORY_FAMILY]["kernel_additive"]
            t_m = nbytes / (spec["mem_bw_gbs"] * 1e9) * 1e3
            return np.asarray(np.maximum(coef["inv_eff_memory"] * t_m, roof) + launch_ms)
        fam = self.families[family]
        coef = fam["kernel_additive"]
        log_ratio = _session(str(self.folder / fam["file"])).run(
            None, {"features": F.features(family, shape, spec)})[0].astype(np.float64)
        t_c = flops / (spec["fp32_gflops"] * 1e9) * 1e3
        t_m = nbytes / (spec["mem_bw_gbs"] * 1e9) * 1e3
        additive = coef["inv_eff_compute"] * t_c + coef["inv_eff_memory"] * t_m
        w = float(self.doc.get("blend_w_mlp", 1.0))
        kernel = np.exp(w * (np.log(roof) + log_ratio) + (1 - w) * np.log(additive + coef["a_ms"]))
        small = np.log10(np.maximum(nbytes, 1.0)) < fam["train_range"]["log10_bytes"][0]
        body = np.where(small, additive, kernel - coef["a_ms"])
        return np.asarray(np.maximum(body, roof) + launch_ms)


@lru_cache(maxsize=16)
def _session(path: str) -> Any:
    import onnxruntime as ort  # deliberately lazy: only a GPU-prior prediction needs it

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


@lru_cache(maxsize=4)
def load_prior(folder: str) -> Prior:
    path = Path(folder) / "prior.json"
    if not path.exists():
        raise DeviceError(f"the GPU prior is not installed ({path} missing); "
                          "run `python -m training.gpuprior`")
    doc = json.loads(path.read_text())
    if doc.get("format") != PRIOR_FORMAT:
        raise DeviceError(f"{path}: format {doc.get('format')!r}, this perfseer-rt reads {PRIOR_FORMAT!r}")
    return Prior(Path(folder), doc)
