"""Calibrating the GPU prior's device entries on NeuSight's whole-model
labels (the plan: ``reports/gpu-prior/neusight_calibration_plan.md``) and
writing each entry's whole-model figures and calibration from the report
(``reports/gpu-prior/neusight_e2e.json``)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np

from perfseer_rt.gpu.calibrate import Correction, fit_correction
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.gpuprior.neusight_labels import KERNEL_GPUS, OUT, REPO, SOURCE


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    by: dict[str, dict[str, float]] = {}
    for dev in sorted({r["device"] for r in rows}):
        e = np.array([r["error"] for r in rows if r["device"] == dev])
        by[dev] = {"n": len(e), "mape": float(np.mean(np.abs(e)) * 100),
                   "median_error": float(np.median(e) * 100), "max_abs": float(np.max(np.abs(e)) * 100)}
    return by


def corrected(corr: Correction, row: dict[str, Any]) -> float:
    """A row's prediction (``predicted_ms``, ``launch_ms`` inside it) with
    ``corr`` applied as the runtime applies it (kernel time only)."""
    return float(corr.apply(row["predicted_ms"] - row["launch_ms"])) + row["launch_ms"]


def lomo_scale(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Leave-one-model-out check of a pure-scale calibration on one device's
    inference rows (``predicted_ms``, ``launch_ms``, ``e2e_ms``,
    ``families``: the kernel families of the prediction): per held-out model
    a scale fitted on the other models' kernel time (:func:`fit_correction`,
    launch overhead out of both sides), covering the families the rows hold."""
    errors = []
    families = tuple(sorted({f for r in rows for f in r["families"]}))
    def fit(on: list[dict[str, Any]]) -> Correction:  # on kernel time: launches out of both
        return fit_correction([r["predicted_ms"] - r["launch_ms"] for r in on],
                              [r["e2e_ms"] - r["launch_ms"] for r in on], families)

    for model in sorted({r["model"] for r in rows}):
        corr = fit([r for r in rows if r["model"] != model])
        errors += [corrected(corr, r) / r["e2e_ms"] - 1 for r in rows if r["model"] == model]
    e = np.array(errors)
    full = fit(rows)
    return {"n": len(e), "mape": float(np.mean(np.abs(e)) * 100), "median_error": float(np.median(e) * 100),
            "max_abs": float(np.max(np.abs(e)) * 100),
            "uncalibrated_mape": float(np.mean([abs(r["predicted_ms"] / r["e2e_ms"] - 1) for r in rows]) * 100),
            "scale": float(np.exp(full.alpha)), "correction": full.to_dict()}


def calibrations(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The plan's calibrations (``neusight_calibration_plan.md``): every
    kernel-row entry's leave-one-model-out check, ``ship`` where it beats
    the uncalibrated prior on the same labels."""
    out = {}
    for dev in KERNEL_GPUS:
        rows = [r for r in doc["rows"] if r["device"] == dev]
        if len({r["model"] for r in rows}) < 2 or len(rows) < 4:
            continue  # a leave-one-model-out fit needs 3 pairs from other models
        check = lomo_scale(rows)
        check["ship"] = check["mape"] < check["uncalibrated_mape"]
        out[dev] = check
    return out


def _report(report: Path) -> dict[str, Any] | None:
    """The report, read once per version of the file (``record`` and
    ``write_entries`` ask three times per device entry); None without one."""
    if not report.exists():
        return None
    st = report.stat()
    return _read(str(report), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4)
def _read(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    """The parsed report at ``path`` (the key's mtime and size make a rewritten file a new entry)."""
    doc: dict[str, Any] = json.loads(Path(path).read_text())
    return doc


def _source(doc: dict[str, Any]) -> str:
    return f"NeuSight, {SOURCE} {doc['commit'][:12]}, PyTorch 2.1 eager fp32"


def whole_model_accuracy(device: str, report: Path = OUT / "neusight_e2e.json") -> dict[str, Any] | None:
    """The ``accuracy.whole_model`` field of ``device``'s manifest from the
    report (None: no report or no labels for it): the prior's figures, or
    for an entry calibrated on these labels the leave-one-model-out ones."""
    doc = _report(report)
    s = doc["summary"].get(device) if doc else None
    if doc is None or s is None:
        return None
    cal = doc.get("calibrations", {}).get(device)
    if cal and cal["ship"]:
        return {"labels": int(cal["n"]), "mape": round(cal["mape"], 2),
                "median_error": round(cal["median_error"], 2),
                "source": _source(doc) + "; calibrated on them, leave-one-model-out",
                "meaning": "whole-model forward latency MAPE % of the calibrated entry, each model "
                           "predicted with a scale fitted on the other models' labels "
                           f"(uncalibrated: {cal['uncalibrated_mape']:.1f} %; "
                           "reports/gpu-prior/neusight_e2e.md)"}
    return {"labels": int(s["n"]), "mape": round(s["mape"], 2), "median_error": round(s["median_error"], 2),
            "source": _source(doc),
            "meaning": "whole-model forward latency MAPE % against the published measurements "
                       "(reports/gpu-prior/neusight_e2e.md)"}


def whole_model_train_accuracy(device: str, report: Path = OUT / "neusight_e2e.json"
                               ) -> dict[str, Any] | None:
    """The ``accuracy.whole_model_train`` field of ``device``'s manifest:
    forward + backward of a training step against NeuSight's training runs
    (with the entry's calibration where it ships one, as the runtime
    applies it); None without runs for it."""
    doc = _report(report)
    rows = [r for r in doc["train_rows"] if r["device"] == device] if doc else []
    if doc is None or not rows:
        return None
    cal = doc.get("calibrations", {}).get(device)
    scaled = bool(cal and cal["ship"])
    e = np.array([r["calibrated_error"] if scaled else r["error"] for r in rows])
    return {"labels": len(rows), "mape": round(float(np.mean(np.abs(e)) * 100), 2),
            "median_error": round(float(np.median(e) * 100), 2),
            "source": _source(doc) + ("; with the entry's inference calibration" if scaled else ""),
            "meaning": "forward + backward time of a training step (no optimizer update), MAPE % "
                       "against the published measurements (reports/gpu-prior/neusight_e2e.md)"}


def calibration_of(device: str, report: Path = OUT / "neusight_e2e.json"
                   ) -> tuple[dict[str, Any] | None, str | None]:
    """(``calibration``, ``calibration_source``) of ``device``'s manifest
    under the plan (``neusight_calibration_plan.md``); (None, None) where
    it ships none."""
    doc = _report(report)
    cal = doc.get("calibrations", {}).get(device) if doc else None
    if doc is None or not cal or not cal["ship"]:
        return None, None
    return cal["correction"], (f"{cal['n']} whole-model inference latencies of "
                               f"{len({r['model'] for r in doc['rows'] if r['device'] == device})} "
                               f"transformers, {_source(doc)}; leave-one-model-out MAPE "
                               f"{cal['mape']:.1f} % (uncalibrated {cal['uncalibrated_mape']:.1f} %)")


def record(root: Path = REPO / "exported_models") -> list[str]:
    """Write each device entry's ``accuracy.whole_model`` and, under the
    plan, its ``calibration`` from the report; returns the entries changed."""
    changed = []
    for manifest in sorted(root.glob("*/manifest.json")):
        doc = json.loads(manifest.read_text())
        if doc.get("kind") != "gpu-prior":
            continue
        name = doc["device"]["name"]
        new = dict(doc, accuracy={**doc["accuracy"]})
        for key, whole in (("whole_model", whole_model_accuracy(name)),
                           ("whole_model_train", whole_model_train_accuracy(name))):
            if whole is not None:
                new["accuracy"][key] = whole
        new["calibration"], new["calibration_source"] = calibration_of(name)
        if new != doc:
            atomic_write_bytes(manifest, json.dumps(new, indent=1).encode())
            changed.append(name)
    return changed
