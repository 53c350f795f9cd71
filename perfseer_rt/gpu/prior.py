"""The exported prior (``exported_models/_gpu_prior``): per-family ONNX
models and their ``prior.json``, run with onnxruntime on the CPU."""

from __future__ import annotations

PRIOR_FORMAT = "perfseer-rt-gpu-prior/1"
PROVENANCE = ("prior from public kernel measurements, PyTorch 2.1 fp32 (NeuSight); "
              "not measured by us")
