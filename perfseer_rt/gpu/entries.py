"""GPU device entries from spec sheets: every shipped sheet
(``perfseer_rt/gpu/spec_sheets``) and every user GPU (``perfseer-rt devices
add-gpu``) is a device of kind ``gpu``, served by
:mod:`perfseer_rt.gpu.predictor` with the shared GPU models in
``exported_models`` (``_gpu_learned``: the learned layer, the default;
``_gpu_prior``: the kernel prior).

The manifest of such an entry is made here, in memory, from its sheet:
nothing is written. Older device names stay accepted as :data:`ALIASES`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfseer_rt.gpu.spec_sheet import SpecSheet
from perfseer_rt.gpu.spec_store import shipped_gpu_specs, user_gpu_specs
from perfseer_rt.graph import layout

KIND = "gpu"
VERSION = "pytorch-eager-1"
RUNTIME = "pytorch-eager"
#: Device names of earlier releases -> today's sheet.
ALIASES = {"h100": "h100-sxm", "h200": "h200-sxm", "a100-40gb": "a100-40gb-pcie",
           "a100-80gb": "a100-80gb-pcie", "a100-sxm4-40gb": "a100-40gb-sxm", "p100": "p100-pcie-16gb",
           "v100": "v100-pcie-32gb"}
INFERENCE_METRICS = ({"name": "latency_ms", "unit": "ms"}, {"name": "peak_mem_mb", "unit": "MiB"},
                     {"name": "sm_util_pct", "unit": "%"}, {"name": "energy_mj", "unit": "mJ"},
                     {"name": "power_w", "unit": "W"})
MODELS = ({"name": "learned", "file": "_gpu_learned/learned.json",
           "description": "the kernel roofline corrected by the learned whole-model layer"},
          {"name": "prior", "file": "_gpu_prior/prior.json",
           "description": "the NeuSight kernel prior alone (fp32 operator measurements by others)"},
          {"name": "blend", "file": "_gpu_learned/learned.json",
           "description": "the geometric mean of learned and prior"})


def held_out_accuracy(models_root: Path) -> dict[str, Any]:
    """The manifest's ``accuracy``, ``training_data`` and
    ``default_model_by_mode`` from the learned layer's record
    (``_gpu_learned/learned.json``): its held-out whole-model latency error
    with the GPU held out, for each model (``prior``: the kernel prior on
    the same labels), on public timings measured by others, and per mode
    the model of :data:`MODELS` with the lowest such error (the default a
    prediction in that mode takes; the first on a tie or where none is
    recorded); empty where the record has none."""
    doc = json.loads((models_root / MODELS[0]["file"]).read_text())
    acc = doc.get("accuracy") or {}
    trained = doc.get("trained") or {}
    logo = acc.get("leave_one_gpu_out")
    if not logo:
        return {}
    names = [m["name"] for m in MODELS]
    by_mode = {mode: min(names, key=lambda m: (b.get(m) or {}).get("mape", float("inf")))
               for mode, b in (acc.get("by_mode") or {}).items()}
    split = "whole-model timings measured by others, each GPU held out (reports/gpu-learned)"
    data = ", ".join(trained.get("sources") or ["public timm and NeuSight runs"])

    def block(a: dict[str, Any]) -> dict[str, Any]:
        return {"latency_ms": {"mape": a["mape"], "within_10": a["within_10"], "count": a["n"], "split": split}}
    others = {m: block(acc[m]) for m in ("prior", "blend") if acc.get(m)}
    return {"accuracy": {"test": {"learned": block(logo), **others},
                         "whole_model": {"mape": logo["mape"], "labels": logo["n"],
                                         "source": f"{data}, GPU held out"
                                         + (f"; architecture family held out {acc['family_held_out']['mape']} %"
                                            if acc.get("family_held_out") else "")}},
            "training_data": {"configurations": trained.get("labels"), "gpus": trained.get("gpus")},
            "default_model_by_mode": by_mode}


def manifest(name: str, sheet: SpecSheet, source: str, user: bool,
             accuracy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The in-memory manifest of the GPU entry ``name`` (``accuracy``: the
    keys of :func:`held_out_accuracy`)."""
    return {**(accuracy or {}), "format": "perfseer-rt-predictor/1", "kind": KIND, "version": VERSION,
            "device": {"name": name, "description": f"{sheet.name} (spec sheet: {source})"},
            "feature_version": layout.FEATURE_VERSION, "runtime": RUNTIME,
            "spec_sheet": sheet.to_dict(), "spec_source": source, "user": user,
            "metrics": [dict(m) for m in INFERENCE_METRICS],
            "models": [dict(m) for m in MODELS], "default_model": "learned", "mig_gpu": sheet.mig}


def gpu_entries(models_root: Path, user_root: Path) -> list[tuple[str, Path, dict[str, Any], bool]]:
    """``(name, folder, manifest, user)`` of every GPU device: the shipped
    sheets, then the user's (a user name equal to a shipped one is skipped;
    ``add-gpu`` refuses such names); none where ``models_root`` lacks the GPU
    models (``_gpu_learned`` and ``_gpu_prior``)."""
    if not all((models_root / m["file"]).is_file() for m in MODELS):
        return []
    acc = held_out_accuracy(models_root)
    out = [(name, models_root, manifest(name, sheet, f"shipped {path.name}", False, acc))
           for name, (path, sheet) in shipped_gpu_specs().items()]
    shipped = {name for name, _, _ in out}
    rows = [(n, f, m, False) for n, f, m in out]
    for name, (path, sheet) in user_gpu_specs(user_root).items():
        if name not in shipped and name not in ALIASES:
            rows.append((name, models_root, manifest(name, sheet, str(path), True, acc), True))
    return rows
