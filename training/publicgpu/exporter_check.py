"""Do the GPU predictions depend on which torch exporter wrote the model?

The export cache (:mod:`training.publicgpu.cache`) holds a seeded share of
the timm architectures twice: written by the TorchScript exporter
(``dynamo=False``, what the learned layer trains on) and by the dynamo
exporter (``dynamo=True``, torch's default since 2.9, what many users
will hand us). The two spell one model differently (BatchNorm folded into
the Conv with or without a bias left, ``unbind`` as Split or Slices,
``F.pad`` kept or folded into the Conv, SDPA's transpose of k as one
Transpose or three nodes); the prediction should not move with the
spelling. This predicts every architecture in both folders on one GPU,
inference and a training step, and reports the ratio dynamo / TorchScript
of latency and of peak memory.

    python -m training.publicgpu.exporter_check --cache DIR [--gpu rtx-4090 --batch 64
        --precision amp-fp16 --model learned] [--out reports/gpu-learned]

Writes ``OUT/exporter_check.json`` (one row per architecture) and
``OUT/exporter_check.md``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict.api import predict
from training.publicgpu.cache import EXPORTERS

REPO = Path(__file__).resolve().parents[2]
MODES = ("inference", "train")
METRICS = ("ms", "mem")


def pairs(cache: Path) -> list[tuple[str, Path, Path]]:
    """(architecture, TorchScript file, dynamo file) for every architecture
    the cache holds from both exporters."""
    ts_dir, dy_dir = (cache / e for e in EXPORTERS)
    return [(p.stem, ts_dir / p.name, p) for p in sorted(dy_dir.glob("*.onnx")) if (ts_dir / p.name).is_file()]


def predicted(path: Path, mode: str, args: argparse.Namespace) -> dict[str, float]:
    """Latency or step ms and peak memory (MiB) of one file."""
    r = predict(str(path), device=args.gpu, batch=args.batch, precision=args.precision, mode=mode,
                model=args.model)[0]["metrics"]
    return {"ms": float(r["step_ms" if mode == "train" else "latency_ms"]["value"]),
            "mem": float(r["peak_mem_mb"]["value"])}


def row_of(name: str, ts: Path, dy: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Both files' predictions, or the error of the one that failed."""
    row: dict[str, Any] = {"model": name}
    for mode in MODES:
        try:
            a, b = predicted(ts, mode, args), predicted(dy, mode, args)
        except PerfSeerError as exc:
            row[f"{mode}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            continue
        for m in METRICS:
            row[f"{mode}_{m}"] = {"torchscript": a[m], "dynamo": b[m], "ratio": round(b[m] / a[m], 4)}
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per mode and metric: the median ratio, mean |ratio - 1| (%), the
    share within 2 % and the extremes."""
    out = {}
    for mode in MODES:
        for m in METRICS:
            r = np.array([row[f"{mode}_{m}"]["ratio"] for row in rows if f"{mode}_{m}" in row])
            if not len(r):
                continue
            out[f"{mode}_{m}"] = {"n": int(len(r)), "median": round(float(np.median(r)), 3),
                                  "mean_abs_dev_pct": round(float(np.mean(np.abs(r - 1))) * 100, 1),
                                  "within_2pct": round(float(np.mean(np.abs(r - 1) < 0.02)) * 100, 1),
                                  "min": round(float(r.min()), 3), "max": round(float(r.max()), 3)}
    return out


def markdown(doc: dict[str, Any]) -> str:
    names = {"inference_ms": "inference latency", "train_ms": "training step",
             "inference_mem": "inference peak memory", "train_mem": "training peak memory"}
    lines = ["# GPU predictions of one model from either torch exporter", "",
             f"Regenerate: `{doc['command']}`", "",
             "Each architecture exported by both torch exporters (TorchScript and dynamo, the export cache's "
             "seeded share), predicted with the same request; ratio = dynamo / TorchScript.", "",
             "| what | architectures | median ratio | mean abs. deviation % | within 2 % | min | max |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key, s in doc["summary"].items():
        lines.append(f"| {names[key]} | {s['n']} | {s['median']} | {s['mean_abs_dev_pct']} | "
                     f"{s['within_2pct']} | {s['min']} | {s['max']} |")
    worst = sorted((r for r in doc["rows"] if "inference_ms" in r),
                   key=lambda r: -abs(r["inference_ms"]["ratio"] - 1))[:10]
    lines += ["", "Largest latency differences:", "",
              "| architecture | inference | training step | inference memory | training memory |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for r in worst:
        cells = [str(r.get(k, {}).get("ratio", "-")) for k in ("inference_ms", "train_ms", "inference_mem",
                                                                  "train_mem")]
        lines.append(f"| {r['model']} | " + " | ".join(cells) + " |")
    errors = [r for r in doc["rows"] if any(k.endswith("_error") for k in r)]
    if errors:
        lines += ["", f"{len(errors)} architecture(s) failed in a mode (the JSON names the error)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.publicgpu.exporter_check",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--gpu", default="rtx-4090")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--precision", default="amp-fp16")
    ap.add_argument("--model", default="learned", help="the GPU device's predictor (learned or prior)")
    ap.add_argument("--out", type=Path, default=REPO / "reports" / "gpu-learned")
    args = ap.parse_args(argv)
    found = pairs(args.cache)
    if not found:
        print(f"error: {args.cache} holds no architecture from both exporters", flush=True)
        return 2
    rows = [row_of(name, ts, dy, args) for name, ts, dy in tqdm(found, desc="architectures")]
    doc = {"command": f"python -m training.publicgpu.exporter_check --cache DIR --gpu {args.gpu} "
                      f"--batch {args.batch} --precision {args.precision} --model {args.model}",
           "summary": summary(rows), "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(args.out / "exporter_check.json", (json.dumps(doc, indent=1) + "\n").encode())
    atomic_write_bytes(args.out / "exporter_check.md", markdown(doc).encode())
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
