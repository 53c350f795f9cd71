"""The manifest that ships beside exported predictors in ``exported_models/<device>/``."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from pathlib import Path
from typing import Sequence

from perfseer_rt.graph import layout
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.seernet.evaluate import metric_unit
from training.seernet.export import INPUT_NAMES, OUTPUT_NAMES
from training.seernet.normalization import Normalization

MANIFEST_FORMAT = "perfseer-rt-predictor/1"


def model_entry(path: str | os.PathLike, name: str, metrics: Sequence[str], parameters: int,
                opset: int = 18, **extra) -> dict:
    """One ``models`` entry: file (relative name), checksum, outputs, I/O signature."""
    data = Path(path).read_bytes()
    return {
        "name": name, "file": Path(path).name, "sha256": hashlib.sha256(data).hexdigest(),
        "outputs": list(metrics), "parameters": int(parameters), "opset": opset,
        "inputs": {"x": ["float32", "N", len(layout.NODE_COLUMNS)], "edge_index": ["int64", 2, "E"],
                   "edge_attr": ["float32", "E", len(layout.EDGE_COLUMNS)],
                   "u": ["float32", "G", len(layout.GLOBAL_COLUMNS)], "node_batch": ["int64", "N"]},
        "output": {OUTPUT_NAMES[0]: ["float32", "G", len(metrics)]},
        "input_order": list(INPUT_NAMES), **extra,
    }


def write_manifest(path: str | os.PathLike, *, device: str, description: str | dict,
                   metrics: Sequence[str], normalization: Normalization, models: list[dict],
                   training_data: dict, accuracy: dict, default_model: str | None = None,
                   **extra) -> dict:
    """Write ``manifest.json`` (atomically) and return its content.

    Args:
        device: the device name the runtime selects it by (e.g. ``"cpu-1t"``).
        description: human words or a dict (GPU name, driver, ORT version...).
        metrics: metric names; units come from their suffixes.
        normalization: the one baked into the ONNX files (recorded for audit).
        models: :func:`model_entry` dicts.
        training_data: :func:`training.seernet.data.dataset_summary`.
        accuracy: split -> model -> metric -> {mape, within_10, count}.
    """
    manifest = {
        "format": MANIFEST_FORMAT,
        "device": {"name": device, "description": description},
        "feature_version": layout.FEATURE_VERSION,
        "columns": {"node": list(layout.NODE_COLUMNS), "edge": list(layout.EDGE_COLUMNS),
                    "global": list(layout.GLOBAL_COLUMNS)},
        "op_vocabulary": list(layout.OP_VOCAB) + [layout.OTHER_OP],
        "metrics": [{"name": m, "unit": metric_unit(m)} for m in metrics],
        "models": models,
        "default_model": default_model or (models[0]["name"] if models else None),
        "normalization": normalization.to_dict(),
        "normalization_baked_in": True,
        # row scatters (ScatterND reductions) are not thread-safe in onnxruntime
        "session": {"intra_op_num_threads": 1},
        "training_data": training_data,
        "accuracy": accuracy,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **extra,
    }
    atomic_write_bytes(path, (json.dumps(manifest, indent=1) + "\n").encode())
    return manifest
