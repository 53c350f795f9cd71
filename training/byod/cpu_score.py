"""Score CPU device entries on real models measured here (:mod:`training.byod.cpu_check`).

For every measured row (model, batch, threads) of ``--measured`` whose
thread count is the device's, the device predicts the model (the library
call behind ``perfseer-rt predict``; graphs extracted once and cached in
``--work``) and the row's ``latency_ms`` (the median, as ``perfseer-rt
profile`` reports it; repeats of a row are averaged in log space) and
``peak_mem_mb`` are compared. The report: MAPE, the share within +-10 %,
the median signed error, per batch size and per model family (the timm
``group`` / HF group), on all rows and on the held-out families
(:func:`held_out`), next to the device's own cross-validated estimate.

    python -m training.byod.cpu_score --measured reports/cpu-calibrate/measured.jsonl \\
        --device local-cpu-1t --work /tmp/cpuw/models --out reports/cpu-calibrate/score_1t.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tqdm import tqdm

from perfseer_rt.graph import PerfGraph, extract
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict import predict
from perfseer_rt.predict.registry import get_predictor
from training.byod.cpu_check import rows_of
from training.seernet.user_check import exported
from training.zoo.real import hf_text
from training.zoo.real.timm_vision import models as timm_models

METRICS = ("latency_ms", "peak_mem_mb")


def group_of(spec: str) -> str:
    """The model family of a ``timm:``/``hf:`` spec (timm's ``group``, the HF group)."""
    name = spec.split("model=")[1].split(",")[0]
    if spec.startswith("timm:"):
        return str(timm_models()[name]["group"])
    return str(hf_text.ARCHITECTURES[name][0])


def held_out(group: str) -> bool:
    """Families scored apart: those whose name hashes to an even first hex
    digit (fixed before any calibration was fitted; the others may guide choices)."""
    return int(hashlib.sha1(group.encode()).hexdigest()[0], 16) % 2 == 0


def measured_pairs(rows: Sequence[dict[str, Any]], threads: int) -> dict[tuple[str, int], dict[str, float]]:
    """(spec, batch) -> metric -> geometric mean over the ok repeats at ``threads``."""
    acc: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.get("threads") != threads or r.get("status") != "ok":
            continue
        for m in METRICS:
            if r.get(m):
                acc[(r["spec"], r["batch"])][m].append(float(r[m]))
    return {k: {m: float(np.exp(np.mean(np.log(v)))) for m, v in d.items()} for k, d in acc.items()}


def graphs_for(keys: Sequence[tuple[str, int]], work: Path) -> dict[tuple[str, int], PerfGraph]:
    cache = work / "graphs"
    cache.mkdir(parents=True, exist_ok=True)
    out = {}
    for spec, batch in tqdm(keys, desc="graphs", unit="graph"):
        f = cache / (hashlib.sha1(f"{spec}@{batch}".encode()).hexdigest()[:16] + ".npz")
        if f.exists():
            out[(spec, batch)] = PerfGraph.load_npz(f)
            continue
        g = extract(exported(spec, work), batch=batch)
        g.save_npz(f)
        out[(spec, batch)] = g
    return out


def stats(pred: np.ndarray, meas: np.ndarray) -> dict[str, Any]:
    err = pred / meas - 1.0
    return {"pairs": int(len(err)), "mape": float(100 * np.mean(np.abs(err))) if len(err) else None,
            "within_10": float(100 * np.mean(np.abs(err) <= 0.10)) if len(err) else None,
            "median_error": float(100 * np.median(err)) if len(err) else None}


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in METRICS:
        sel = [r for r in rows if r.get(m)]
        p = np.array([r[m]["predicted"] for r in sel])
        y = np.array([r[m]["measured"] for r in sel])
        held = np.array([r["held_out"] for r in sel], dtype=bool)
        batches = sorted({r["batch"] for r in sel})
        b = np.array([r["batch"] for r in sel])
        out[m] = {"all": stats(p, y), "held_out_families": stats(p[held], y[held]),
                  "other_families": stats(p[~held], y[~held]),
                  "by_batch": {str(x): stats(p[b == x], y[b == x]) for x in batches}}
    return out


def score(device: str, measured: Path, work: Path) -> dict[str, Any]:
    pred = get_predictor(device)
    threads = int((pred.manifest.get("calibration") or {}).get("threads") or 1)
    pairs = measured_pairs(rows_of(measured), threads)
    keys = sorted(pairs)
    graphs = graphs_for(keys, work)
    results = predict([graphs[k] for k in keys], device=device, metrics=list(METRICS))
    rows = []
    for (spec, batch), res in zip(keys, results):
        group = group_of(spec)
        row: dict[str, Any] = {"spec": spec, "batch": batch, "group": group, "held_out": held_out(group)}
        for m in METRICS:
            if m in pairs[(spec, batch)]:
                p, y = res["metrics"][m]["value"], pairs[(spec, batch)][m]
                iv = res["metrics"][m].get("interval")
                row[m] = {"measured": y, "predicted": p, "error_pct": 100 * (p / y - 1),
                          "inside_interval": None if not iv else bool(iv[0] <= y <= iv[1])}
        rows.append(row)
    corrections = (pred.manifest.get("calibration") or {}).get("corrections") or {}
    return {"device": device, "threads": threads, "measured": str(measured),
            "cross_validated": {m: {k: c.get(k) for k in ("kind", "cv_mape", "cv_within_10", "count")}
                                for m, c in corrections.items()},
            "summary": summarize(rows), "rows": rows}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.byod.cpu_score", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measured", type=Path, required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    doc = score(a.device, a.measured, a.work)
    doc["command"] = "python -m training.byod.cpu_score " + " ".join(sys.argv[1:] if argv is None else argv)
    if a.out:
        atomic_write_bytes(a.out, (json.dumps(doc, indent=1) + "\n").encode())
    print(json.dumps({"device": doc["device"], "cross_validated": doc["cross_validated"],
                      "summary": doc["summary"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
