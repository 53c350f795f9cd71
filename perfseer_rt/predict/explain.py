"""What a prediction means: the predictor that made it, its device, its units.

:func:`annotate` completes one result of :func:`perfseer_rt.predict.predict`
(the shared result contract): ``predictor`` (device entry, model kind,
version, provenance, device description), ``mode``, and per metric its unit
spelled out and a ``meaning``. Keys already present are kept, so a newer
predictor path that fills them itself wins.

The meanings restate how the labels were measured
(:mod:`perfseer_rt.profile.record`, :mod:`perfseer_rt.profile.hostmem`):
memory is MiB (2**20 bytes) *over the measuring process's baseline*, not the
process's total.
"""

from __future__ import annotations

import re
from typing import Any

from perfseer_rt.predict import local_cpu
from perfseer_rt.predict.registry import Predictor, predictors

#: Manifests before 2026-11-23 wrote "MB" for memory measured in MiB.
_UNIT_FIX = {"MB": "MiB"}

_CPU_MEM = ("peak resident memory (VmHWM) of the measuring process over its RSS after importing "
            "onnxruntime and before creating the session, MiB (2**20 bytes); the Python "
            "interpreter and onnxruntime's own start-up memory are in that baseline, not here")
_GPU_MEM = ("peak GPU memory (NVML) of the measuring process over its value before creating the "
            "session, MiB (2**20 bytes); the CUDA context is in that baseline, not here")
_LATENCY = ("median wall time of one inference call on one batch (onnxruntime `run`), "
            "milliseconds")
_LATENCY_OTHERS = "latency of one batch as its source measured it, milliseconds"
_GENERIC = {
    "sm_util_pct": "mean share of time a GPU kernel ran over the timed window (NVML), percent",
    "energy_mj": "GPU energy per batch (NVML energy counter over the window / runs), millijoules",
}


def is_gpu(pred: Predictor) -> bool:
    desc = pred.manifest["device"].get("description")
    return bool(pred.mig_gpu or (isinstance(desc, dict) and desc.get("gpu_name")))


def measured_here(pred: Predictor) -> bool:
    """True when the labels came from perfseer-rt's own profiler (an
    environment block describes the device), not from another project."""
    return isinstance(pred.manifest["device"].get("description"), dict)


def threads(pred: Predictor) -> int | None:
    """onnxruntime intra-op threads of the measurements: the manifest's
    ``device.threads``, a calibrated entry's ``calibration.threads`` or, by
    the naming convention of CPU entries, the ``-<N>t`` suffix of the device
    name (``cpu-amd-epyc-1t``: one thread)."""
    dev = pred.manifest["device"]
    if dev.get("threads"):
        return int(dev["threads"])
    if (pred.manifest.get("calibration") or {}).get("threads"):
        return int(pred.manifest["calibration"]["threads"])
    m = re.search(r"-(\d+)t$", pred.device)
    return int(m.group(1)) if m else None


def device_description(pred: Predictor) -> str:
    """One line: runtime, execution provider, threads, precision, hardware."""
    desc = pred.manifest["device"].get("description")
    if not isinstance(desc, dict):
        return str(desc or pred.device)
    ort = f"onnxruntime {desc['onnxruntime_version']}" if desc.get("onnxruntime_version") \
        else "onnxruntime"
    parts = []
    if desc.get("gpu_name"):
        parts.append(f"{ort} CUDA execution provider")
    else:
        n = threads(pred)
        parts.append(f"{ort} CPU execution provider"
                     + (f", {n} intra-op thread{'s' if n != 1 else ''}" if n else ""))
    parts.append(pred.manifest["device"].get("precision", "fp32"))
    if desc.get("gpu_name"):
        parts.append(desc["gpu_name"] + (f" ({desc['gpu_memory_mb']} MiB)"
                                         if desc.get("gpu_memory_mb") else ""))
    if desc.get("cpu_model"):
        parts.append(desc["cpu_model"] + (f" ({desc['cpu_cores']} cores)"
                                          if desc.get("cpu_cores") else ""))
    return ", ".join(parts)


def unit(pred: Predictor, metric: str) -> str:
    u = pred.unit(metric)
    return _UNIT_FIX.get(u, u) if metric.startswith("peak_mem") else u


def meaning(pred: Predictor, metric: str) -> str:
    if metric.startswith("latency"):
        return _LATENCY if measured_here(pred) else _LATENCY_OTHERS
    if metric.startswith("peak_mem"):
        return _GPU_MEM if is_gpu(pred) else _CPU_MEM
    return _GENERIC.get(metric, f"{metric} as recorded by the profiler "
                        "(perfseer_rt/profile/record.py)")


def predictor_info(pred: Predictor, model: str | None = None) -> dict[str, Any]:
    """The ``predictor`` block of a result."""
    name = model or pred.default_model
    entry = next((m for m in pred.model_entries if m["name"] == name), {})
    data = pred.manifest.get("training_data") or {}
    source = data.get("source") or (data.get("notes") or {}).get("source")  # schema 1 / 2
    acc = ", ".join(f"{m} {a['mape']:.1f} %" for m in pred.metrics
                    if (a := pred.test_accuracy(m, name)).get("mape") is not None)
    provenance = (f"trained on {data.get('configurations', '?')} measured configurations"
                  + (f" ({source})" if source else "")
                  + (f"; test MAPE {acc}" if acc else ""))
    scales = "; ".join(f"{m} x{fs.factor:.3f}" for m, fs in pred.field_scale.items())
    if scales:
        provenance += (f"; field scale {scales} (median measured/predicted on real models never "
                       "trained on, measured after the labels: see the manifest's seernet.field_scale)")
    if isinstance(pred.manifest.get("provenance"), str):  # a GPU prior: where its data came from
        provenance = pred.manifest["provenance"]
    created = str(pred.manifest.get("created", ""))[:10]
    sha = str(entry.get("sha256", ""))[:12]
    kind = entry.get("architecture") or entry.get("kind", name)  # schema 2 / schema 1 and gpu-prior
    scaled = ",".join(f"{m}x{fs.factor:.4f}" for m, fs in pred.field_scale.items())
    version = " ".join(x for x in (created, f"sha256:{sha}" if sha else "",
                                   f"field-scale:{scaled}" if scaled else "") if x)
    return {"device": pred.device, "kind": kind, "model": name, "version": version or "unknown",
            "provenance": provenance, "description": device_description(pred)}


def annotate(result: dict[str, Any], pred: Predictor, model: str | None = None) -> dict[str, Any]:
    """Complete ``result`` in place (and return it); keys present are kept."""
    result.setdefault("mode", pred.manifest.get("mode", "inference"))
    result.setdefault("predictor", predictor_info(pred, model))
    for name, m in result.get("metrics", {}).items():
        if name in pred.metrics:
            m["unit"] = unit(pred, name)
            m.setdefault("meaning", meaning(pred, name))
        m.setdefault("interval", None)
        m.setdefault("coverage", None)
    return result


def device_rows() -> list[dict[str, Any]]:
    """Every shipped predictor, described (``perfseer-rt devices --json``, GET /devices)."""
    here = local_cpu.local_cpu()
    rows = []
    for name, pred in sorted(predictors().items()):
        m = pred.manifest
        rows.append({"device": name, "description": device_description(pred),
                     "predictor": predictor_info(pred),
                     "metrics": [{"name": x["name"], "unit": unit(pred, x["name"]),
                                  "meaning": meaning(pred, x["name"]),
                                  "test_mape_pct": pred.test_accuracy(x["name"]).get("mape"),
                                  "test_within_10_pct":
                                      pred.test_accuracy(x["name"]).get("within_10")}
                                 for x in m["metrics"]],
                     "models": pred.model_names, "default_model": pred.default_model,
                     "default_model_by_mode": dict(m.get("default_model_by_mode") or {}),
                     "mig_gpu": pred.mig_gpu, "kind": pred.kind,
                     "leave_one_gpu_out": m.get("accuracy", {}).get("leave_one_gpu_out"),
                     "whole_model": m.get("accuracy", {}).get("whole_model"),
                     "user_entry": pred.user, "base": (m.get("calibration") or {}).get("base"),
                     "local_cpu_match": local_cpu.matches_local(m, here),
                     "configurations": (m.get("training_data") or {}).get("configurations")})
    return rows
