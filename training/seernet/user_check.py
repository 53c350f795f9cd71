"""A user-style check of a shipped predictor: what a user sees who exports a
published model, measures it with ``perfseer-rt profile`` and compares with
``perfseer-rt predict``.

    python -m training.seernet.user_check --out reports/cpu-amd-epyc-1t/user_check_2.json \\
        --device cpu-amd-epyc-1t --core 1 --specs "timm:model=resnet101,res=224" ... --batches 1 4 16

Each spec is exported once (``training.zoo``, random weights) into
``--work``; each (spec, batch) is measured by the CLI pinned to ``--core``
and predicted by the CLI; rows are appended to ``--out`` as they finish (the
file is rewritten atomically) and a rerun skips rows already there, so it
resumes. Each measured row keeps ``speed_probe_ms``, the campaign's probe of
the measuring core (:mod:`training.campaign.probe`) run on ``--core`` right
before and after the profile (mean of the two), so a check measured on a
disturbed or faster core can be told apart from the training data (whose
records carry the same probe). A spec that torch cannot export is listed under ``not_exportable``
with its error and skipped (the plan is never redrawn). ``--repredict``
keeps the measurements of an existing file and asks the predictor again
(after a retrain). Measure on a quiet machine: the
latency is a real wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tqdm import tqdm

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict.uncertainty import DISAGREEMENT_WARNING, DISTANCE_WARNING
from perfseer_rt.profile import environment
from training.campaign.probe import speed_probe
from training.zoo import export_onnx, parse_spec
from training.zoo.export import EXPORTERS

METRICS = ("latency_ms", "peak_mem_mb")


def _cli(args: Sequence[str], core: int | None = None) -> dict[str, Any]:
    cmd = ([] if core is None else ["taskset", "-c", str(core)]) + ["perfseer-rt", *args, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
    out = json.loads(proc.stdout)
    return out[0] if isinstance(out, list) else out


def probe_core(core: int) -> float:
    """:func:`speed_probe` (ms) run pinned to ``core`` (this process's
    affinity is restored after)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        return speed_probe()
    finally:
        os.sched_setaffinity(0, before)


def predict_row(model: str, batch: int, device: str) -> dict[str, Any]:
    """The CLI's prediction of one (model, batch): value, interval and
    warnings per metric."""
    return _cli(["predict", model, "--batch", str(batch), "--device", device])


def compare(measured: dict[str, float], pred: dict[str, Any]) -> dict[str, Any]:
    """One row's metrics: measured, predicted, signed error %, inside interval."""
    row: dict[str, Any] = {}
    for m in METRICS:
        p = pred["metrics"][m]
        iv = p.get("interval")
        row[m] = {"measured": measured[m], "predicted": p["value"],
                  "error_pct": (p["value"] / measured[m] - 1) * 100,
                  "inside_interval": None if iv is None else bool(iv[0] <= measured[m] <= iv[1]),
                  "gap": p.get("disagreement")}
    warnings = pred.get("warnings", [])
    row["ood_warning"] = any(w.startswith(DISTANCE_WARNING) for w in warnings)
    row["disagreement_warning"] = any(w.startswith(DISAGREEMENT_WARNING) for w in warnings)
    row["distance_score"] = (pred.get("distance") or {}).get("score")
    row["predictor_version"] = (pred.get("predictor") or {}).get("version")
    return row


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """MAPE, median signed error and interval coverage per metric (percent),
    and how often each warning fired."""
    out: dict[str, Any] = {"pairs": len(rows)}
    for flag in ("ood_warning", "disagreement_warning"):
        out[flag] = sum(bool(r.get(flag)) for r in rows)
    for m in METRICS:
        err = np.array([r[m]["error_pct"] for r in rows])
        inside = [r[m]["inside_interval"] for r in rows if r[m]["inside_interval"] is not None]
        out[m] = {"mape": float(np.mean(np.abs(err))) if len(err) else None,
                  "median_error": float(np.median(err)) if len(err) else None,
                  "coverage": float(np.mean(inside)) * 100 if inside else None}
    return out


def exported(spec: str, work: Path, exporter: str = "torchscript") -> Path:
    """The ONNX file of ``spec`` in ``work``, exported there on first use
    (``exporter``: torch's exporter, :data:`training.zoo.export.EXPORTERS`)."""
    suffix = "" if exporter == "torchscript" else f".{exporter}"
    path = work / (re.sub(r"[^a-z0-9_]", "_", spec) + suffix + ".onnx")
    if not path.exists():
        export_onnx(parse_spec(spec), str(path), exporter=exporter)
    return path


def _save(path: Path, doc: dict[str, Any]) -> None:
    doc["summary"] = summary(doc["rows"])
    atomic_write_bytes(path, (json.dumps(doc, indent=1) + "\n").encode())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.seernet.user_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--device", default="cpu-amd-epyc-1t")
    ap.add_argument("--specs", nargs="*", default=[])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 4, 16])
    ap.add_argument("--core", type=int, default=1, help="CPU core the profiler is pinned to")
    ap.add_argument("--work", type=Path, default=Path("/tmp/perfseer-user-check"))
    ap.add_argument("--repredict", action="store_true", help="keep the measurements, predict again")
    ap.add_argument("--exporter", choices=EXPORTERS, default="torchscript",
                    help="torch's exporter for the models (the datasets use torchscript; dynamo is "
                         "torch's default since 2.9)")
    a = ap.parse_args(argv)
    if a.repredict and not a.out.is_file():
        ap.error(f"--repredict: {a.out} does not exist (nothing measured to predict again)")
    doc: dict[str, Any] = json.loads(a.out.read_text()) if a.out.exists() else {"rows": []}
    a.work.mkdir(parents=True, exist_ok=True)
    if a.repredict:
        for r in tqdm(doc["rows"], desc="re-predict"):
            path = exported(r["spec"], a.work, r.get("exporter", "torchscript"))
            r.update(compare({m: r[m]["measured"] for m in METRICS}, predict_row(str(path), r["batch"], a.device)))
        doc["predicted_with"] = f"perfseer-rt predict MODEL --batch B --device {a.device} --json"
        _save(a.out, doc)
    if any(r.get("exporter", "torchscript") != a.exporter for r in doc["rows"]):
        ap.error(f"{a.out} holds rows of another exporter; one file per exporter")
    done = {(r["spec"], r["batch"]) for r in doc["rows"]}
    todo = [(s, b) for s in a.specs for b in a.batches if (s, b) not in done]
    if todo:
        doc.setdefault("environment", {
            **{k: v for k, v in environment().items() if k.startswith("cpu") or k.startswith("onnx")},
            "measured_with": f"taskset -c {a.core} perfseer-rt profile MODEL --batch B --json "
                             "(CPU provider, 1 thread, defaults)",
            "models": "exported with training.zoo.export_onnx (random weights)"
                      + ("" if a.exporter == "torchscript" else f", exporter={a.exporter}")})
        doc["predicted_with"] = f"perfseer-rt predict MODEL --batch B --device {a.device} --json"
    failed = {f["spec"] for f in doc.get("not_exportable", [])}
    for spec, batch in tqdm(todo, desc="user check"):
        if spec in failed:
            continue
        try:
            path = exported(spec, a.work, a.exporter)
        except Exception as e:  # noqa: BLE001 - any exporter failure: a user gets no ONNX of it either
            # the plan is fixed before measuring: a model torch cannot export
            # is recorded as such, never replaced by another draw
            doc.setdefault("not_exportable", []).append({"spec": spec, "error": f"{type(e).__name__}: {e}"[:300]})
            failed.add(spec)
            _save(a.out, doc)
            continue
        probe = probe_core(a.core)
        prof = _cli(["profile", str(path), "--batch", str(batch)], core=a.core)
        probe = (probe + probe_core(a.core)) / 2
        measured = {m: float(prof.get("metrics", prof)[m]) for m in METRICS}
        doc["rows"].append({"spec": spec, "batch": batch, "speed_probe_ms": probe,
                            **({} if a.exporter == "torchscript" else {"exporter": a.exporter}),
                            **compare(measured, predict_row(str(path), batch, a.device))})
        _save(a.out, doc)
    if not a.out.exists():
        _save(a.out, doc)
    s = summary(doc["rows"])
    print(json.dumps(s, indent=1), file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
