"""The same model with its weights inline and as external data: measured
peak memory of each (the figures behind the extractor's external-weights
warning, reports/cpu-amd-epyc-1t/model_kinds.md).

Each model (an ONNX file with its weights) is saved twice in ``--work``,
weights inline and weights in one external data file beside it, and both
are measured with ``perfseer-rt profile`` pinned to one core at each shape
point (``--batch`` values, or ``--dim`` sets for models with named dims).
The rows hold each phase's peak (session creation, inference) for both.

Run (quiet core): ``training/dataset/quiet_core.sh python -m
training.seernet.external_check --out reports/cpu-amd-epyc-1t/external_check.json
--model resnet50.onnx:1,16 --model genai/model.onnx:batch_size=1+sequence_length=128+...``
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.profile import environment
from training.seernet.user_check import _cli

PHASES = ("peak_mem_mb", "load_peak_mb", "run_peak_mb")


def points(spec: str) -> list[list[str]]:
    """``1,16`` -> batch points; ``a=1+b=2,a=4+b=2`` -> named-dim points."""
    out = []
    for point in spec.split(","):
        if "=" in point:
            out.append([a for d in point.split("+") for a in ("--dim", d)])
        else:
            out.append(["--batch", point])
    return out


def copies(model: Path, work: Path) -> dict[str, Path]:
    """The model saved with weights inline and as one external data file."""
    proto = onnx.load(str(model))
    base = work / model.parent.name / model.stem
    base.parent.mkdir(parents=True, exist_ok=True)
    inline, external = base.with_suffix(".inline.onnx"), base.with_suffix(".external.onnx")
    if not inline.exists():
        onnx.save(proto, str(inline))
    if not external.exists():
        onnx.save(proto, str(external), save_as_external_data=True,
                  location=external.name + ".data", size_threshold=1024)
    return {"inline": inline, "external": external}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.seernet.external_check",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--model", action="append", required=True, metavar="PATH:POINTS")
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--work", type=Path, default=Path("/tmp/perfseer-external-check"))
    a = ap.parse_args(argv)
    doc: dict[str, Any] = {
        "environment": {**{k: v for k, v in environment().items()
                           if k.startswith("cpu") or k.startswith("onnx")},
                        "measured_with": f"taskset -c {a.core} perfseer-rt profile MODEL "
                                         "[--batch B | --dim ...] --json (CPU provider, 1 thread)"},
        "rows": []}
    for item in a.model:
        path, _, spec = item.rpartition(":")
        files = copies(Path(path), a.work)
        for point in points(spec):
            row: dict[str, Any] = {"model": path, "point": " ".join(point)}
            for kind, f in files.items():
                rec = _cli(["profile", str(f), *point], core=a.core)
                row[kind] = {k: rec[k] for k in PHASES}
            row["ratio"] = row["external"]["peak_mem_mb"] / row["inline"]["peak_mem_mb"]
            doc["rows"].append(row)
            print(json.dumps(row), flush=True)
    atomic_write_bytes(a.out, (json.dumps(doc, indent=1) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
