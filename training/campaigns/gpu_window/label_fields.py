"""Our GPU records as learned-layer labels: the fields of
``training.gpulearned.tables.Label`` (the lead's), read off one record.

``training/gpulearned/labels.py`` builds a ``Label`` per record; for records
measured by us (``measured_by == "us"``, under ``data/gpu``) every field comes
from the record itself::

    Label(str(cache / f["onnx"]), **{k: v for k, v in f.items() if k != "onnx"})

with ``f = label_fields(record)``, when ``cache / f["onnx"]`` exists. The
rebuilds: timm records name the public records' export
(``torchscript/<model>@<res>.onnx``, made by ``python -m training.publicgpu
export``); hf and zoo records name ``zoo/<arch_id>.onnx``, the zoo's
structure-only export of ``spec`` (``python -m training.zoo export SPEC -o
CACHE/zoo/<arch_id>.onnx --structure-only``).
"""

from __future__ import annotations

from typing import Any

#: setup.attention values under which PyTorch ran fused attention
FUSED_ATTENTION = ("sdpa", "timm-default")


def rebuild_path(rec: dict[str, Any]) -> str:
    """The record's structure-only ONNX rebuild, relative to the export cache."""
    return rec.get("onnx") or f"zoo/{rec['arch_id']}.onnx"


def label_fields(rec: dict[str, Any]) -> dict[str, Any]:
    """``Label`` fields of an ok record measured by us (see the module doc).

    Raises:
        ValueError: the record is not an ok measurement of ours.
    """
    if rec.get("measured_by") != "us" or rec.get("status") != "ok":
        raise ValueError(f"record {rec.get('key')!r}: not an ok measurement of ours")
    # lazy: the spec sheets, read only when labels are made
    from perfseer_rt.gpu.spec_store import shipped_gpu_specs

    sheets = {sheet.name: key for key, (_, sheet) in shipped_gpu_specs().items()}
    s = rec["setup"]
    mode = s["mode"]
    ms = rec["metrics"]["step_ms" if mode == "train" else "latency_ms"]
    return {"onnx": rebuild_path(rec), "batch": int(rec["batch"]),
            "gpu": sheets.get(rec["env"].get("gpu_name") or "", rec["device"]),
            "precision": s["precision"], "layout": "nchw" if s["layout"] == "n/a" else s["layout"],
            "mode": mode, "optimizer": s.get("optimizer"),
            "sdpa": s.get("attention") in FUSED_ATTENTION, "ms": float(ms),
            "group": f"{rec['family']}/{rec['group']}", "kind": rec["arch_kind"], "source": "ours"}
