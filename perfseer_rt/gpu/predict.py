"""Whole-model GPU inference predictions from the prior (device entries of
``"kind": "gpu-prior"``; dispatched to from :func:`perfseer_rt.predict`).

Latency: every PerfGraph node becomes a kernel (:mod:`perfseer_rt.gpu.kernels`),
priced by the prior on the device's spec sheet (:mod:`perfseer_rt.gpu.prior`)
plus the entry's per-kernel launch overhead, summed in schedule order (one
stream, no overlap). Memory: :mod:`perfseer_rt.gpu.memory`. MIG:
:mod:`perfseer_rt.gpu.mig_advice`. A ``calibration`` block in the manifest
(:mod:`perfseer_rt.gpu.calibrate`) corrects the latency once our own records
for the device exist.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu import features as F
from perfseer_rt.gpu import memory, mig_advice
from perfseer_rt.gpu.calibrate import Correction
from perfseer_rt.gpu.kernels import Kernels, map_graph
from perfseer_rt.gpu.manifest import GpuPriorManifest, parse_gpu_prior
from perfseer_rt.gpu.prior import PROVENANCE, Prior, load_prior
from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.graph import PerfGraph, extract
from perfseer_rt.graph.extract import general_warnings
from perfseer_rt.graph.load import load_model
from perfseer_rt.predict.mig import margin_for
from perfseer_rt.predict.registry import Predictor

KIND = "gpu-prior"
#: ``precision`` values: fp32 (the data's), or fp16/bf16 under the tensor-core assumption.
PRECISIONS = ("fp32", "fp16-tc", "bf16-tc")
TC_ASSUMPTION = ("ASSUMPTION (not in the data): matmul/conv kernels reach the same fraction "
                 "of the tensor-core roofline (spec-sheet dense fp16/bf16 peak) as the fp32 "
                 "kernels reach of the fp32 roofline, and every tensor moves 2 bytes per element")
FP32_NOTE = ("fp16/bf16 kernels are not in the prior's data (NeuSight, fp32 only): this is an "
             "fp32 prediction; --precision fp16-tc/bf16-tc scales by the tensor-core peak under "
             "a stated assumption")


class GpuPriorDevice:
    """One gpu-prior device entry: spec sheet, prior, overheads, calibration."""

    def __init__(self, name: str, folder: Path, manifest: dict[str, Any]) -> None:
        self.name, self.manifest = name, manifest
        self.typed: GpuPriorManifest = parse_gpu_prior(manifest)  # strict: ManifestError naming the field
        self.spec = self.typed.gpu_spec
        self.prior: Prior = load_prior(str((folder / self.typed.prior).resolve()))
        self.launch_ms = self.typed.kernel_launch_ms
        self.correction: Correction | None = self.typed.calibration
        self.calibration_source = self.typed.calibration_source

    def latency_ms(self, kernels: Kernels, spec: GpuSpec, tc: bool = False,
                   corrected: bool = True) -> tuple[float, dict[str, Any]]:
        """Total ms and ms per family of ``kernels`` on ``spec`` (with the
        entry's calibration unless ``corrected`` is False)."""
        parts = {}
        for fam, shape in kernels.shapes.items():
            s = spec
            if tc and fam in F.GEMM_FAMILIES:
                if spec.tc16_gflops is None:
                    raise PerfSeerError(f"{spec.name} has no tensor-core fp16/bf16 peak on its spec sheet")
                s = replace(spec, fp32_gflops=spec.tc16_gflops)
            arr = F.spec_arrays(s, len(kernels.nodes[fam]))
            parts[fam] = float(self.prior.kernel_ms(fam, shape, arr, self.launch_ms).sum())
        total = sum(parts.values())
        if corrected and self.correction is not None:
            total = self.correction.total(parts, self.launches_ms(kernels))
        return total, parts

    def launches_ms(self, kernels: Kernels) -> dict[str, float]:
        """The launch overhead inside each family's ms (kernels x the
        entry's per-kernel launch cost): a calibration leaves it as it is."""
        return {fam: len(nodes) * self.launch_ms for fam, nodes in kernels.nodes.items()}


def model_proto(source: Any) -> onnx.ModelProto | None:
    """The ModelProto of a prediction's source (None for a PerfGraph: its
    weights are then read from the graph)."""
    if isinstance(source, PerfGraph):
        return None
    return load_model(source)[0]


def device_for(pred: Predictor, precision: str) -> tuple[GpuPriorDevice, bool]:
    """The entry's :class:`GpuPriorDevice` and whether ``precision`` asks for
    the tensor-core assumption.

    Raises:
        PerfSeerError: an unknown precision, or a tensor-core precision on a
            GPU whose spec sheet has no tensor-core peak.
    """
    if precision not in PRECISIONS:
        raise PerfSeerError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    dev = GpuPriorDevice(pred.device, pred.folder, pred.manifest)
    tc = precision != "fp32"
    if tc and not dev.spec.tc16_gflops:
        raise PerfSeerError(f"device {pred.device!r} has no tensor-core fp16/bf16 peak on its "
                            "spec sheet; only --precision fp32 is available")
    return dev, tc


def element_scale(graph: PerfGraph, tc: bool) -> tuple[float, float]:
    """(median bytes per element of the graph's tensors, the byte scale the
    tensor-core assumption applies to an fp32 model: 0.5, else 1)."""
    itemsize = float(np.median(graph.edge_column("dtype_bytes"))) if graph.num_edges else 4.0
    return itemsize, 0.5 if tc and itemsize >= 4 else 1.0


def header(pred: Predictor, source: Any, graph: PerfGraph, mode: str, precision: str,
           description: str) -> dict[str, Any]:
    """The fields every gpu-prior prediction starts with: model, device,
    batch, mode, precision and the predictor's identity."""
    return {"model": os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<in-memory>",
            "device": pred.device, "batch": int(graph.globals["batch_size"]), "mode": mode,
            "precision": precision,
            "predictor": {"device": pred.device, "kind": KIND, "model": "roofline-fraction-mlp",
                          "version": pred.manifest.get("version", ""),
                          "provenance": pred.manifest.get("provenance", PROVENANCE),
                          "description": description}}


def predict_gpu(pred: Predictor, models: list[Any], batch: int | None = None,
                metrics: Sequence[str] | None = None,
                input_shapes: dict[str, tuple[int, ...]] | None = None,
                precision: str | None = None, dims: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Predictions for a ``gpu-prior`` device entry (``pred``: a registry
    Predictor). See :func:`perfseer_rt.predict.api.predict` for arguments."""
    precision = precision or "fp32"
    dev, tc = device_for(pred, precision)
    names = [m["name"] for m in pred.manifest["metrics"]]
    wanted = list(metrics) if metrics else names
    results = []
    for source in models:
        graph = source if isinstance(source, PerfGraph) else extract(
            source, batch=batch, input_shapes=input_shapes, dims=dims)
        proto = model_proto(source)
        itemsize, scale = element_scale(graph, tc)
        kernels = map_graph(graph, itemsize_scale=scale)
        lat, parts = dev.latency_ms(kernels, dev.spec, tc)
        mem, mem_parts, exact = memory.estimate(graph, proto, pred.manifest["memory_overhead"], scale)
        warnings = [TC_ASSUMPTION if tc else FP32_NOTE] + kernels.notes + general_warnings(graph.warnings)
        if not tc and itemsize < 4:
            warnings.append(f"the model's tensors are {itemsize:g}-byte: fp16 kernels are priced "
                            "as fp32 ones on the fp32 peak (no tensor cores) unless --precision is given")
        if not exact:
            warnings.append("weights from the PerfGraph: a shared initializer counts once per use")
        if graph.unknown_ops:
            warnings.append("ops without a cost rule: " + ", ".join(sorted(set(graph.unknown_ops))))
        accuracy = pred.manifest.get("accuracy", {})
        logo = accuracy.get("leave_one_gpu_out", {})
        whole = accuracy.get("whole_model")
        lat_meaning = (f"whole-model inference latency, one stream: the sum over {kernels.count} "
                       f"kernels of the prior's per-kernel latency plus {dev.launch_ms * 1e3:g} us "
                       "launch overhead each (views free); onnxruntime CUDA EP assumed. The prior "
                       "was fitted on single operators (leave-one-GPU-out MAPE "
                       + (f"{logo['mape']:.1f} % on this GPU" if logo.get("mape") is not None
                          else "not available for this GPU, which has no measured rows")
                       + ("); whole-model check: MAPE {mape:.1f} % (median {median_error:+.1f} %) "
                          "on {labels} transformer latencies measured by others ({source})".format(**whole)
                          if whole else "); no whole-model GPU labels for this GPU validate the sum")
                       + (f"; the parts are the prior's, the value is scaled by the entry's calibration "
                          f"({dev.calibration_source})" if dev.correction else ""))
        metric_values = {
            "latency_ms": {"value": round(lat, 4), "unit": "ms", "interval": None,
                           "coverage": None, "meaning": lat_meaning,
                           "parts": {k: round(v, 4) for k, v in parts.items()},
                           "launch_overhead_ms": round(sum(dev.launches_ms(kernels).values()), 4)},
            "peak_mem_mb": {"value": mem, "unit": "MiB", "interval": None, "coverage": None,
                            "meaning": "estimated peak GPU memory of the process (as nvidia-smi "
                                       "shows it): weights (exact" + ("" if exact else ", upper bound")
                                       + ") + largest live activation set + allocator rounding + "
                                       "workspace + CUDA context (assumed figures, not measured by us)",
                            "parts": mem_parts}}
        result = {**header(pred, source, graph, "inference", precision,
                           f"{dev.spec.name}: spec sheet + NeuSight kernel prior"
                           + (", calibrated" if dev.correction else "")),
                  "metrics": {m: metric_values[m] for m in wanted}, "mig": None, "warnings": warnings}
        if pred.manifest.get("mig_gpu"):
            result["mig"] = mig_advice.advise(
                pred.manifest["mig_gpu"], dev.spec, mem, margin_for(None),
                lambda s: dev.latency_ms(kernels, s, tc)[0])  # noqa: B023 (advise calls it before the loop moves on)
        results.append(result)
    return results
