"""Structure-only ONNX rebuilds of our hf and zoo records, on the CPU, here.

    python -m training.campaigns.gpu_window rebuilds --cache DIR [--data data/gpu]

For every architecture of an ok hf / zoo record under ``--data`` without a
file yet, ``training.zoo.export_onnx(config, CACHE/zoo/<arch_id>.onnx,
structure_only=True)`` (the zoo's exporter: TorchScript, dynamic batch,
tensors of 1 KiB or more left as dangling references). timm records use the
public records' rebuilds (``python -m training.publicgpu export --cache DIR``),
named by their ``onnx`` field. Resumable: existing files are skipped; a
failure is printed and counted, the next architecture goes on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from training.campaigns.gpu_window.label_fields import rebuild_path
from training.campaigns.gpu_window.shards import read_lines


def wanted(data: Path) -> dict[str, dict[str, Any]]:
    """rebuild path -> config of every ok non-timm record under ``data``."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(data.glob("**/records/*.jsonl")):
        for r in read_lines(path)[0]:
            if r.get("status") == "ok" and r.get("measured_by") == "us" and r["family"] != "timm":
                out[rebuild_path(r)] = r["config"]
    return out


def export_all(data: Path, cache: Path) -> dict[str, int]:
    # lazy: the zoo imports torch, needed only for zoo rebuilds
    from training.zoo import ModelConfig, export_onnx

    counts = {"exported": 0, "present": 0, "failed": 0}
    for rel, config in sorted(wanted(data).items()):
        path = cache / rel
        if path.is_file():
            counts["present"] += 1
            continue
        try:
            export_onnx(ModelConfig.from_dict(config), path, structure_only=True)
            counts["exported"] += 1
        except Exception as exc:  # noqa: BLE001 - reported, the others go on
            counts["failed"] += 1
            print(json.dumps({"rebuild": rel, "failed": f"{type(exc).__name__}: {exc}"[:300]}), flush=True)
    return counts
