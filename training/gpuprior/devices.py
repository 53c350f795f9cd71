"""Device entries of the GPU prior: ``exported_models/<device>/manifest.json``.

One entry per spec sheet (NeuSight's nine, copied verbatim) plus the H200,
whose sheet is not in NeuSight's set and is written here from NVIDIA's
public H200 datasheet (see :data:`H200`). Each entry names the prior
(``_gpu_prior``), its provenance, the assumptions it rests on, and the
leave-one-GPU-out accuracy where the GPU has rows.
"""

from __future__ import annotations

import json
from pathlib import Path

from perfseer_rt.gpu.prior import PROVENANCE
from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.graph import layout
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.gpuprior.neusight_calibration import calibration_of, whole_model_accuracy, whole_model_train_accuracy

#: NVIDIA H200 (SXM) from NVIDIA's H200 Tensor Core GPU datasheet
#: (nvidia.com/en-us/data-center/h200): 141 GB HBM3e, 4.8 TB/s, FP32 67
#: TFLOPS, FP16/BF16 tensor core 1,979 TFLOPS with sparsity (989.5 dense).
#: The GH100 die of the H100 SXM: 132 SMs x 128 fp32 cores at 1,980 MHz
#: boost (= 66,908 GFLOP/s, as NeuSight's H100 sheet) and 50 MB L2.
H200 = {"Device": "NVIDIA H200", "Dev_Mem": 141, "Mem_Bw": 4800, "Num_Sm": 132,
        "Core_Per_SM": 128, "Freq": 1980, "SingleFLOPs": 66908, "L2Cache": 50}

#: Dense fp16/bf16 tensor-core peaks, GFLOP/s, from NVIDIA's datasheets
#: (the "with sparsity" figures halved): A100 312 TFLOPS, H100 SXM / H200
#: 989.5, V100 PCIe 112, T4 65, L4 121. P100 and P4 have no tensor cores.
TC16 = {"NVIDIA A100-PCIE-40GB": 312000, "NVIDIA A100-SXM4-40GB": 312000,
        "NVIDIA A100 80GB PCIe": 312000, "NVIDIA H100 80GB HBM3": 989500, "NVIDIA H200": 989500,
        "Tesla V100-PCIE-32GB": 112000, "Tesla T4": 65000, "NVIDIA L4": 121000}

#: spec-sheet name -> (device entry name, MIG profile table or None)
ENTRIES = {"NVIDIA A100-PCIE-40GB": ("a100-40gb", "a100-40gb"),
           "NVIDIA A100-SXM4-40GB": ("a100-sxm4-40gb", "a100-40gb"),
           "NVIDIA A100 80GB PCIe": ("a100-80gb", "a100-80gb"),
           "NVIDIA H100 80GB HBM3": ("h100", "h100-80gb"),
           "NVIDIA H200": ("h200", "h200-141gb"),
           "NVIDIA L4": ("l4", None), "Tesla P100-PCIE-16GB": ("p100", None),
           "Tesla P4": ("p4", None), "Tesla T4": ("t4", None),
           "Tesla V100-PCIE-32GB": ("v100", None)}

#: Assumed runtime overheads (not measured by us; see perfseer_rt.gpu.memory).
KERNEL_LAUNCH_MS = 0.005
CUDA_CONTEXT_MIB = 500.0
CUBLAS_WORKSPACE_MIB = 32.0
ASSUMPTIONS = [
    f"per-kernel launch overhead {KERNEL_LAUNCH_MS * 1e3:g} us (onnxruntime CUDA EP, one stream)",
    f"CUDA context + cuBLAS/cuDNN {CUDA_CONTEXT_MIB:g} MiB, cuBLAS workspace "
    f"{CUBLAS_WORKSPACE_MIB:g} MiB",
    "PyTorch 2.1 eager kernels stand in for onnxruntime's (same cuBLAS/cuDNN families)",
]


def write_entries(specs: dict[str, GpuSpec], prior_doc: dict, folds: list[dict], root: Path,
                  version: str) -> list[str]:
    """Write every entry's manifest; returns the entry names."""
    specs = dict(specs)
    h200 = GpuSpec.from_config(H200)
    specs[h200.name] = h200
    written = []
    for sheet, spec in specs.items():
        name, mig_gpu = ENTRIES[sheet]
        doc = spec.to_config()
        if sheet in TC16:
            doc["TC16_FLOPs"] = TC16[sheet]
        mine = [r for r in folds if r["held_out"] == sheet]
        accuracy = {}
        if mine:
            accuracy["leave_one_gpu_out"] = {
                "mape": round(sum(r["prior"]["mape"] for r in mine) / len(mine), 2),
                "per_operator": {r["family"]: r["prior"]["mape"] for r in mine},
                "meaning": "per-operator MAPE % with this GPU held out of the fit"}
        # the last whole-model check (training/gpuprior/neusight_e2e.py)
        for key, whole in (("whole_model", whole_model_accuracy(name)),
                           ("whole_model_train", whole_model_train_accuracy(name))):
            if whole is not None:
                accuracy[key] = whole
        calibration, calibration_source = calibration_of(name)  # the last whole-model check's plan
        manifest = {
            "format": "perfseer-rt-predictor/1", "kind": "gpu-prior", "version": version,
            "device": {"name": name, "description": f"{sheet} (spec sheet + public kernel prior)"},
            "feature_version": layout.FEATURE_VERSION, "provenance": PROVENANCE,
            "spec": doc,
            "spec_source": ("NVIDIA H200 datasheet (see training/gpuprior/devices.py)"
                            if sheet == H200["Device"] else
                            "NeuSight device_configs (external/neusight-kernels)"),
            "has_kernel_rows": bool(mine), "prior": "../_gpu_prior",
            "metrics": [{"name": "latency_ms", "unit": "ms"}, {"name": "peak_mem_mb", "unit": "MiB"}],
            "models": [{"name": "gpu-prior", "file": "../_gpu_prior/prior.json"}],
            "default_model": "gpu-prior", "mig_gpu": mig_gpu,
            "kernel_launch_ms": KERNEL_LAUNCH_MS,
            "memory_overhead": {"cuda_context_mib": CUDA_CONTEXT_MIB,
                                "cublas_workspace_mib": CUBLAS_WORKSPACE_MIB},
            "assumptions": ASSUMPTIONS, "accuracy": accuracy,
            "calibration": calibration, "calibration_source": calibration_source,
            "training_data": {"configurations": sum(f["rows"] for f in prior_doc["families"].values())},
        }
        (root / name).mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(root / name / "manifest.json", json.dumps(manifest, indent=1).encode())
        written.append(name)
    return written
