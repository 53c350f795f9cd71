"""Write the manifest that ships beside exported predictors in ``exported_models/<device>/``.

The schema (and its strict reader) is :mod:`perfseer_rt.predict.manifest`;
this module fills it from training's objects and checks the document with
that reader before writing it.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Sequence

from perfseer_rt.graph import layout
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict.manifest import (
    FORMAT,
    INPUT_NAMES,
    INTRA_OP_THREADS,
    OUTPUT_NAMES,
    SCHEMA_VERSION,
    parse_manifest,
)
from training.seernet.evaluate import metric_unit
from training.seernet.normalization import Normalization

#: training_data keys with a typed place in the schema; any other goes to ``notes``.
_SUMMARY_KEYS = ("configurations", "architectures", "families", "batch_sizes", "nodes",
                 "flops_total", "metrics")


def model_entry(path: str | os.PathLike, name: str, metrics: Sequence[str], parameters: int,
                opset: int = 18, *, kind: str = "SeerNet") -> dict:
    """One ``seernet.models`` entry: file (relative name), checksum, outputs, I/O
    signature; ``kind`` names the architecture (``"SeerNet, one per metric"``)."""
    data = Path(path).read_bytes()
    return {
        "name": name, "file": Path(path).name, "sha256": hashlib.sha256(data).hexdigest(),
        "outputs": list(metrics), "parameters": int(parameters), "opset": opset,
        "inputs": {"x": ["float32", "N", len(layout.NODE_COLUMNS)], "edge_index": ["int64", 2, "E"],
                   "edge_attr": ["float32", "E", len(layout.EDGE_COLUMNS)],
                   "u": ["float32", "G", len(layout.GLOBAL_COLUMNS)], "node_batch": ["int64", "N"]},
        "output": {OUTPUT_NAMES[0]: ["float32", "G", len(metrics)]},
        "input_order": list(INPUT_NAMES), "architecture": kind,
    }


def _training_data(summary: dict) -> dict:
    """:func:`training.seernet.data.dataset_summary` (plus free-form keys) in schema form."""
    return {**{k: summary[k] or None if k in ("nodes", "flops_total") else summary[k]
               for k in _SUMMARY_KEYS},
            "metrics": {m: {"count": s.get("count", 0), "min": s.get("min"),
                            "median": s.get("median"), "max": s.get("max")}
                        for m, s in summary["metrics"].items()},
            # op types: written by ``python -m training.seernet.training_ops`` (null until then)
            "ops": summary.get("ops"),
            "notes": {k: v for k, v in summary.items() if k not in (*_SUMMARY_KEYS, "ops")}}


def _accuracy(accuracy: dict) -> dict:
    """split -> model -> metric -> {mape, within_10, spearman, count}; derived
    entries that are not per metric (``mean_mape``) are left out."""
    return {split: {model: {metric: {"mape": a.get("mape"), "within_10": a.get("within_10"),
                                     "spearman": a.get("spearman"), "count": int(a.get("count") or 0)}
                            for metric, a in per_model.items() if isinstance(a, dict)}
                    for model, per_model in per_split.items()}
            for split, per_split in accuracy.items()}


def write_manifest(path: str | os.PathLike, *, device: str, description: str | dict,
                   metrics: Sequence[str], normalization: Normalization, models: list[dict],
                   training_data: dict | None, accuracy: dict, default_model: str | None = None,
                   report: dict | None = None, mig_gpu: str | None = None,
                   uncertainty: dict | None = None, memory: dict | None = None,
                   mode: str = "inference", step: dict | None = None) -> dict:
    """Write ``manifest.json`` (atomically, after a strict parse) and return its content.

    Args:
        device: the device name the runtime selects it by (e.g. ``"cpu-1t"``).
        description: human words or a dict (GPU name, driver, ORT version...).
        metrics: metric names; units come from their suffixes.
        normalization: the one baked into the ONNX files (recorded for audit).
        models: :func:`model_entry` dicts.
        training_data: :func:`training.seernet.data.dataset_summary`; keys
            beyond it (``source``, ``train_rows``...) land in ``notes``.
        accuracy: split -> model -> metric -> {mape, within_10, count[, spearman]}.
        report: provenance; ``command`` is the command that made it, the rest
            lands in ``provenance.notes``.
        mig_gpu: the GPU's MIG profile table (``perfseer_rt.predict.mig``), if any.
        uncertainty: the ``seernet.uncertainty`` section
            (:func:`training.seernet.uncertainty.calibrate`), if calibrated.
        memory: the ``seernet.memory`` section (peak-memory parts), if the
            model predicts the memory phases.
        mode: ``"inference"`` or ``"train"`` (labels of one training step).
        step: mode ``"train"``: the step its labels timed
            (:class:`perfseer_rt.predict.manifest.TrainStep` fields).
    """
    report = dict(report or {})
    manifest: dict[str, Any] = {
        "format": FORMAT, "schema_version": SCHEMA_VERSION, "kind": "seernet",
        "device": {"name": device, "description": description},
        "feature_version": layout.FEATURE_VERSION,
        "columns": {"node": list(layout.NODE_COLUMNS), "edge": list(layout.EDGE_COLUMNS),
                    "global": list(layout.GLOBAL_COLUMNS)},
        "op_vocabulary": list(layout.OP_VOCAB) + [layout.OTHER_OP],
        "metrics": [{"name": m, "unit": metric_unit(m)} for m in metrics],
        "training_data": _training_data(training_data) if training_data is not None else None,
        "accuracy": _accuracy(accuracy),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "provenance": {"command": report.pop("command", None), "notes": report},
        "mig_gpu": mig_gpu,
        "mode": mode, "step": step,
        "seernet": {
            "models": models,
            "default_model": default_model or (models[0]["name"] if models else None),
            "normalization": normalization.to_dict(),
            "normalization_baked_in": True,
            "session": {"intra_op_num_threads": INTRA_OP_THREADS},
            "uncertainty": uncertainty,
            "memory": memory,
            "field_scale": None,  # set from field measurements by training.seernet.recalibrate
        },
    }
    manifest = json.loads(json.dumps(manifest, default=_json_default))  # numpy -> JSON types
    parse_manifest(manifest)  # what the runtime will read: fail here, not there
    atomic_write_bytes(path, (json.dumps(manifest, indent=1) + "\n").encode())
    return manifest


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"manifest: {type(obj).__name__} is not JSON")
