"""Widen a shipped predictor's intervals with what real models measured.

    python -m training.seernet.recalibrate exported_models/cpu-amd-epyc-1t \\
        --checks reports/cpu-amd-epyc-1t/user_check_holdout2.json ...

The shipped intervals are split-conformal quantiles of ``log(measured /
predicted)`` on held-out architectures and held-out families of the
training data (:mod:`training.seernet.uncertainty`). Real models a user
exports can err more than those: the untuned checks measured peak memory
inside the 90 % interval for 56 % of real models. This tool takes user
checks (:mod:`training.seernet.user_check` files, predicted by *this*
predictor with ``--repredict``: rows carry ``distance_score``) of models
the predictor never trained on, computes the same conformal quantiles on
their residuals per metric and distance bin, and sets each bin to the union
of its old interval and the checks' one. The union keeps the stated coverage
for a model like the training data's held-out ones *and* for a model like the
checks' real ones (each source's own conformal guarantee), at the price of
width. A bin with fewer than :data:`MIN_BIN` check residuals takes the
quantiles of all the checks' residuals of that metric. What it did is kept in
``seernet.uncertainty.calibration.real_models`` of the manifest.

The check files used here are spent as accuracy evidence for this
predictor's intervals: coverage must be read on a check measured after.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Collection, Sequence

import numpy as np

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict.explain import predictor_info
from perfseer_rt.predict.manifest import ManifestError, parse_manifest
from perfseer_rt.predict.registry import Predictor
from perfseer_rt.predict.uncertainty import conformal_quantiles
from training.seernet.data import DatasetError, read_records
from training.seernet.uncertainty import MIN_BIN


class RecalibrationError(ValueError):
    """A check file or predictor that cannot be used (the message names it)."""


def check_residuals(rows: Sequence[dict[str, Any]], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """``(log(measured / predicted), distance score)`` of every row with both."""
    r, s = [], []
    for row in rows:
        m, score = row.get(metric), row.get("distance_score")
        if not m or score is None or not (m["measured"] > 0 and m["predicted"] > 0):
            continue
        r.append(np.log(m["measured"] / m["predicted"]))
        s.append(float(score))
    return np.array(r, dtype=np.float64), np.array(s, dtype=np.float64)


def widen(intervals: dict[str, Any], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """New ``intervals`` (manifest form; each bin's ``max_score`` bounds the
    distance scores of its rows) and a record of what changed.

    Returns ``{"intervals": ..., "record": {metric: [per-bin dict]}}``; a
    metric with fewer than :data:`MIN_BIN` check residuals is left as it was.
    """
    new = json.loads(json.dumps(intervals))
    record: dict[str, Any] = {}
    for metric, iv in new.items():
        r, s = check_residuals(rows, metric)
        if len(r) < MIN_BIN:
            record[metric] = {"left": f"{len(r)} check residuals (< {MIN_BIN})"}
            continue
        all_lo, all_hi = conformal_quantiles(r, iv["coverage"])
        lower = -np.inf
        bins = []
        for b in iv["bins"]:
            upper = np.inf if b["max_score"] is None else b["max_score"]
            sel = (s > lower) & (s <= upper)
            lo, hi = conformal_quantiles(r[sel], iv["coverage"]) if sel.sum() >= MIN_BIN else (all_lo, all_hi)
            bins.append({"max_score": b["max_score"], "checks": int(sel.sum()),
                         "pooled": bool(sel.sum() < MIN_BIN), "before": [b["lo"], b["hi"]],
                         "checks_quantiles": [lo, hi]})
            b["lo"], b["hi"] = min(b["lo"], lo), max(b["hi"], hi)
            b["count"] = int(b["count"] + sel.sum())
            lower = upper
        record[metric] = bins
    return {"intervals": new, "record": record}


def model_name(spec: str) -> str:
    """``family:model=NAME`` of a zoo spec, without resolution or sequence length."""
    return spec.split(",")[0]


def trained_models(datasets: Sequence[Path]) -> set[str]:
    """Every :func:`model_name` the records of ``datasets`` hold."""
    return {model_name(str(r["spec"])) for r in read_records(datasets) if r.get("spec")} if datasets else set()


def recalibrate(predictor: Path, checks: Sequence[Path], exclude: Collection[str] = frozenset()) -> dict[str, Any]:
    """Rewrite ``predictor/manifest.json`` with widened intervals; returns the record.

    Rows of a model in ``exclude`` (:func:`model_name`, e.g. the models the
    predictor trained on at some batch or sequence length) are left out: their
    errors are not those of a model the predictor has never seen.

    Raises:
        RecalibrationError: a check predicted by another predictor version,
            or rows without distance scores (predict them again first).
    """
    path = predictor / "manifest.json"
    doc = json.loads(path.read_text())
    pred = Predictor(doc["device"]["name"], predictor, doc, schema=parse_manifest(doc))
    version = predictor_info(pred)["version"]
    unc = doc["seernet"]["uncertainty"]
    if "real_models" in unc["calibration"]:
        raise RecalibrationError(f"{path}: already widened with real-model checks "
                                 f"({', '.join(unc['calibration']['real_models']['checks'])}); "
                                 "export the predictor again to start from its own calibration")
    found: list[dict[str, Any]] = []
    for f in checks:
        rows_f = json.loads(Path(f).read_text()).get("rows", [])
        stale = sorted({str(r.get("predictor_version")) for r in rows_f} - {version})
        if stale:
            raise RecalibrationError(f"{f}: rows predicted by {', '.join(stale)}, not by {version}; "
                                     "run `python -m training.seernet.user_check --repredict` first")
        found.extend(rows_f)
    names = [model_name(str(r.get("spec", ""))) for r in found]
    rows = [r for r, n in zip(found, names) if n not in exclude]
    out = widen(unc["intervals"], rows)
    unc["intervals"] = out["intervals"]
    unc["calibration"]["real_models"] = {
        "checks": [str(f) for f in checks], "rows": len(rows),
        "left_out_models": sorted(set(exclude) & set(names)),
        "bins": out["record"],
        "method": "per metric and distance bin: union of the shipped conformal interval and the "
                  "split-conformal interval of the checks' log(measured/predicted) (a bin with < "
                  f"{MIN_BIN} check residuals takes all of the metric's)"}
    try:
        parse_manifest(doc)
    except ManifestError as exc:  # a bug here, not in the user's input
        raise RuntimeError(f"recalibrate wrote an invalid manifest: {exc}") from exc
    atomic_write_bytes(path, (json.dumps(doc, indent=1) + "\n").encode())
    return unc["calibration"]["real_models"]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.seernet.recalibrate",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("predictor", type=Path, help="exported predictor folder (with manifest.json)")
    ap.add_argument("--checks", nargs="+", type=Path, required=True,
                    help="user-check files predicted by this predictor")
    ap.add_argument("--training-data", nargs="*", type=Path, default=[], metavar="DIR",
                    help="the predictor's dataset folders: check rows of models in them are left out")
    a = ap.parse_args(argv)
    try:
        rec = recalibrate(a.predictor, a.checks, trained_models(a.training_data))
    except (RecalibrationError, ManifestError, DatasetError, OSError, json.JSONDecodeError) as exc:
        print(f"recalibrate: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(rec, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
