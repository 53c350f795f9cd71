"""Widen a shipped predictor's intervals with what real models measured.

    python -m training.seernet.recalibrate exported_models/cpu-amd-epyc-1t \\
        --checks reports/cpu-amd-epyc-1t/user_check_holdout2.json ... \\
        --training-data data/cpu-amd-epyc-1t/inference ... \\
        --field-scale-checks reports/cpu-amd-epyc-1t/user_check_holdout10.json ...

The shipped intervals are split-conformal quantiles of ``log(measured /
predicted)`` on held-out architectures and held-out families of the
training data (:mod:`training.seernet.uncertainty`). Real models a user
exports can err more than those: the untuned checks measured peak memory
inside the 90 % interval for 56 % of real models. This tool takes user
checks (:mod:`training.seernet.user_check` files, predicted by *this*
predictor with ``--repredict``: rows carry ``distance_score``) of models
the predictor never trained on, computes the same conformal quantiles on
their residuals per metric and bin (distance score and batch group, as
the shipped bins are cut), and sets each bin to the union of its old
interval and the checks' one. The union keeps the stated coverage for a
model like the training data's held-out ones *and* for a model like the
checks' real ones (each source's own conformal guarantee), at the price of
width. A bin with fewer than :data:`MIN_BIN` check residuals takes those of
its batch group, else all the checks' residuals of that metric. What it did is kept in
``seernet.uncertainty.calibration.real_models`` of the manifest.

The disagreement warning's thresholds (where the predictor has one) are
chosen again on the same check rows (:func:`real_model_warnings`): the
export chose them on held-out families, whose gaps are smaller than real
models' (session 15: on the real-model held-out split the export's
thresholds, with the distance warning, fired on 65 % of the configurations
within 10 %).

The check files used here are spent as accuracy evidence for this
predictor's intervals and warnings: read them on a check measured after.

**Field scale** (``--field-scale-checks``): the labels were measured over
days on shared machines whose speed drifts; real models measured later with
the shipped profiler can sit a few percent off them as a whole (session 14:
every check of sessions 12-13 measured 0.92-0.94x the predicted latency,
while the profiler and the campaign read the same models alike). Given checks
measured after the labels, of models never trained on, each metric's
factor is the median of ``measured / predicted`` over their rows; it is
validated leaving one check file out (the factor fitted on the others,
MAPE on the one left out, pooled) and kept only where that MAPE falls by at
least :data:`MIN_GAIN` points (a factor that moves nothing is not shipped). The
kept factors go into ``seernet.field_scale`` (applied by
:func:`perfseer_rt.predict.seernet_run.reported`), and the widening above then
reads every check's residual against the scaled prediction.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

import numpy as np

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict.explain import predictor_info
from perfseer_rt.predict.manifest import ManifestError, parse_manifest
from perfseer_rt.predict.registry import Predictor
from perfseer_rt.predict.uncertainty import conformal_quantiles, takes
from training.seernet.data import DatasetError, read_records
from training.seernet.uncertainty import MIN_BIN, fire_rates, gap_warnings

#: Percentage points of leave-one-check-out MAPE a field scale must gain to be kept.
MIN_GAIN = 0.5


class RecalibrationError(ValueError):
    """A check file or predictor that cannot be used (the message names it)."""


def check_residuals(rows: Sequence[dict[str, Any]], metric: str,
                    floor: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(log(measured / predicted), distance score, batch size)`` of every
    row with all three; with ``floor`` (a disagreement-scaled interval), the
    log ratio over ``floor + |gap|`` (rows without a gap are an error).

    Raises:
        RecalibrationError: a row without the gap a scaled interval needs.
    """
    r, s, b = [], [], []
    for row in rows:
        m, score = row.get(metric), row.get("distance_score")
        if not m or score is None or row.get("batch") is None or not (m["measured"] > 0 and m["predicted"] > 0):
            continue
        unit = 1.0
        if floor is not None:
            if m.get("gap") is None:
                raise RecalibrationError(f"{row.get('spec')} batch {row['batch']}: no {metric} gap (the "
                                         "predictor's disagreement); predict the check again with --repredict")
            unit = floor + abs(float(m["gap"]))
        r.append(np.log(m["measured"] / m["predicted"]) / unit)
        s.append(float(score))
        b.append(int(row["batch"]))
    return np.array(r, dtype=np.float64), np.array(s, dtype=np.float64), np.array(b, dtype=np.int64)


def widen(intervals: dict[str, Any], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """New ``intervals`` (manifest form) and a record of what changed.

    Each check row goes to the first bin that takes its distance score and
    batch size (as at prediction); a disagreement-scaled metric's residuals
    are over ``floor + |gap|`` (:func:`check_residuals`), as its bins are. A bin with fewer than :data:`MIN_BIN`
    rows takes the quantiles of the rows of its batch group whatever their
    score, or of all the metric's rows if that group is short too.

    Returns ``{"intervals": ..., "record": {metric: [per-bin dict]}}``; a
    metric with fewer than :data:`MIN_BIN` check residuals is left as it was.
    """
    new = json.loads(json.dumps(intervals))
    record: dict[str, Any] = {}
    for metric, iv in new.items():
        r, s, bt = check_residuals(rows, metric, iv["floor"] if iv.get("scale") == "disagreement" else None)
        if len(r) < MIN_BIN:
            record[metric] = {"left": f"{len(r)} check residuals (< {MIN_BIN})"}
            continue
        where = np.array([next(i for i, b in enumerate(iv["bins"])
                               if takes(b["max_score"], b["max_batch"], sc, ba))
                          for sc, ba in zip(s, bt)])
        bins = []
        for i, b in enumerate(iv["bins"]):
            sel = where == i
            fallback = "none"
            if sel.sum() < MIN_BIN:  # the rows of its batch group, else all
                group = np.array([takes(None, b["max_batch"], 0.0, ba) for ba in bt])
                lower_groups = [o["max_batch"] for o in iv["bins"][:i]
                                if o["max_score"] == b["max_score"] and o["max_batch"] is not None]
                group &= bt > max(lower_groups, default=0)
                use_group = MIN_BIN <= group.sum() < len(r)
                sel, fallback = (group, "batch group") if use_group else (np.ones(len(r), bool), "all")
            lo, hi = conformal_quantiles(r[sel], iv["coverage"])
            bins.append({"max_score": b["max_score"], "max_batch": b["max_batch"],
                         "checks": int((where == i).sum()), "pooled": fallback,
                         "before": [b["lo"], b["hi"]], "checks_quantiles": [lo, hi]})
            b["lo"], b["hi"] = min(b["lo"], lo), max(b["hi"], hi)
            b["count"] = int(b["count"] + (where == i).sum())
        record[metric] = bins
    return {"intervals": new, "record": record}


def _mape(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(100 * np.mean(np.abs(pred / meas - 1)))


def _median_ratio(pm: np.ndarray) -> float:
    """Median of measured / predicted over rows ``[predicted, measured]`` (geometric, as a log median)."""
    return float(np.exp(np.median(np.log(pm[:, 1] / pm[:, 0]))))


def fit_field_scale(sources: Mapping[str, Sequence[dict[str, Any]]], metrics: Sequence[str],
                    measured: str) -> dict[str, Any]:
    """Each metric's field scale (see the module doc) from ``sources``
    (check file -> its rows) and what was decided.

    Returns ``{"kept": {metric: FieldScale fields}, "record": {metric: dict}}``:
    a metric is kept only with rows from at least two sources, at least
    :data:`MIN_BIN` rows, and a leave-one-source-out MAPE at least
    :data:`MIN_GAIN` points below the MAPE without a factor.
    """
    kept: dict[str, Any] = {}
    record: dict[str, Any] = {}
    for metric in metrics:
        by_src = {}
        for src, rows in sources.items():
            pm = np.array([(r[metric]["predicted"], r[metric]["measured"]) for r in rows
                           if r.get(metric) and r[metric]["predicted"] > 0 and r[metric]["measured"] > 0],
                          dtype=np.float64).reshape(-1, 2)
            if len(pm):
                by_src[src] = pm
        n = sum(len(pm) for pm in by_src.values())
        if len(by_src) < 2 or n < MIN_BIN:
            record[metric] = {"kept": False, "why": f"{n} rows from {len(by_src)} check files "
                                                     f"(needs >= {MIN_BIN} from >= 2)"}
            continue
        every = np.concatenate(list(by_src.values()))
        factor = _median_ratio(every)
        loo_pred = np.concatenate([
            pm[:, 0] * _median_ratio(np.concatenate([o for s, o in by_src.items() if s != src]))
            for src, pm in by_src.items()])
        before, after = _mape(every[:, 0], every[:, 1]), _mape(loo_pred, every[:, 1])
        entry = {"factor": factor, "rows": n, "sources": sorted(by_src), "measured": measured,
                 "loo_mape_before": before, "loo_mape_after": after}
        keep = after <= before - MIN_GAIN
        record[metric] = {**entry, "kept": keep,
                          "per_source_factor": {src: _median_ratio(pm) for src, pm in by_src.items()}}
        if keep:
            kept[metric] = entry
    return {"kept": kept, "record": record}


def real_model_warnings(unc: Mapping[str, Any], rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The disagreement warning's thresholds chosen again on check rows of
    real models (``rows``, predicted with the field scale), the way the
    export chose them on held-out families
    (:func:`training.seernet.uncertainty.calibrate`): per metric the
    ``|gap|`` threshold that best separates that metric's errors above 25 %
    from those within 10 %, then kept, best first, only where it raises the
    J of "any warning fires" (the distance warning included) on the rows'
    worst errors. None where the predictor has no disagreement section.

    Returns ``{"thresholds": {metric: float}, "record": {...}}``.
    """
    dis = unc.get("disagreement")
    if not dis:
        return None
    metrics = [m for m in unc["intervals"] if all((r.get(m) or {}).get("gap") is not None for r in rows)]
    rows = [r for r in rows if r.get("distance_score") is not None
            and all(r[m]["measured"] > 0 and r[m]["predicted"] > 0 for m in metrics)]
    if len(rows) < MIN_BIN or not metrics:
        return {"thresholds": dict(dis["thresholds"]),
                "record": {"left": f"{len(rows)} check rows with gaps (< {MIN_BIN}): the export's thresholds"}}
    err = {m: np.array([100 * abs(r[m]["predicted"] / r[m]["measured"] - 1) for r in rows]) for m in metrics}
    gap = {m: np.array([abs(float(r[m]["gap"])) for r in rows]) for m in metrics}
    worst = np.max(np.stack(list(err.values())), axis=0)
    fired = np.array([float(r["distance_score"]) > unc["threshold"] for r in rows])
    record: dict[str, Any] = {"rows": len(rows), "distance_warning": fire_rates(fired.astype(float), worst, 0.5)}
    thresholds, per_metric = gap_warnings({m: (gap[m], err[m]) for m in metrics}, gap, fired, worst)
    for m, rec in per_metric.items():
        record[m] = {**rec, "export_threshold": dis["thresholds"].get(m)}
    fired = fired | np.any([gap[m] > t for m, t in thresholds.items()], axis=0) if thresholds else fired
    record["any_warning"] = fire_rates(fired.astype(float), worst, 0.5)
    return {"thresholds": thresholds, "record": record}


def scaled_rows(rows: Sequence[dict[str, Any]], factors: dict[str, float]) -> list[dict[str, Any]]:
    """``rows`` with each metric's ``predicted`` multiplied by its factor."""
    return [{**r, **{m: {**r[m], "predicted": r[m]["predicted"] * f} for m, f in factors.items() if r.get(m)}}
            for r in rows]


def model_name(spec: str) -> str:
    """``family:model=NAME`` of a zoo spec, without resolution or sequence length."""
    return spec.split(",")[0]


def trained_models(datasets: Sequence[Path]) -> set[str]:
    """Every :func:`model_name` the records of ``datasets`` hold."""
    return {model_name(str(r["spec"])) for r in read_records(datasets) if r.get("spec")} if datasets else set()


def _read_checks(files: Sequence[Path], version: str) -> dict[str, dict[str, Any]]:
    """file -> its check document, each file's rows predicted by ``version``."""
    docs: dict[str, dict[str, Any]] = {}
    for f in files:
        doc = json.loads(Path(f).read_text())
        stale = sorted({str(r.get("predictor_version")) for r in doc.get("rows", [])} - {version})
        if stale:
            raise RecalibrationError(f"{f}: rows predicted by {', '.join(stale)}, not by {version}; "
                                     "run `python -m training.seernet.user_check --repredict` first")
        docs[str(f)] = doc
    return docs


def _rows_of(docs: Mapping[str, dict[str, Any]], exclude: Collection[str]) -> dict[str, list[dict[str, Any]]]:
    """file -> its rows of models not in ``exclude``."""
    return {f: [r for r in doc.get("rows", []) if model_name(str(r.get("spec", ""))) not in exclude]
            for f, doc in docs.items()}


def _measured_with(docs: Mapping[str, dict[str, Any]]) -> str:
    """How the check files were measured (their environment blocks), one line."""
    seen = []
    for doc in docs.values():
        env = doc.get("environment") or {}
        line = (f"{env.get('cpu_model', '?')} family {env.get('cpu_family', '?')} model "
                f"{env.get('cpu_model_id', '?')}: {env.get('measured_with', '?')}")
        if line not in seen:
            seen.append(line)
    return "; ".join(seen)


def recalibrate(predictor: Path, checks: Sequence[Path], exclude: Collection[str] = frozenset(),
                field_checks: Sequence[Path] = ()) -> dict[str, Any]:
    """Rewrite ``predictor/manifest.json`` with a field scale fitted on
    ``field_checks`` (if any) and intervals widened with ``checks``, read
    against the scaled predictions; returns the record.

    Rows of a model in ``exclude`` (:func:`model_name`, e.g. the models the
    predictor trained on at some batch or sequence length) are left out: their
    errors are not those of a model the predictor has never seen.

    Raises:
        RecalibrationError: a check predicted by another predictor version,
            or a predictor widened or scaled already (export it again).
    """
    path = predictor / "manifest.json"
    doc = json.loads(path.read_text())
    pred = Predictor(doc["device"]["name"], predictor, doc, schema=parse_manifest(doc))
    version = predictor_info(pred)["version"]
    unc = doc["seernet"]["uncertainty"]
    if "real_models" in unc["calibration"] or doc["seernet"].get("field_scale"):
        raise RecalibrationError(f"{path}: already widened or scaled with real-model checks; "
                                 "export the predictor again to start from its own calibration")
    docs = _read_checks(checks, version)
    rows = [r for rs in _rows_of(docs, exclude).values() for r in rs]
    names = {model_name(str(r.get("spec", ""))) for doc in docs.values() for r in doc.get("rows", [])}
    field = _read_checks(field_checks, version)
    scale = (fit_field_scale(_rows_of(field, exclude), list(unc["intervals"]), _measured_with(field))
             if field else None)
    if scale is not None:
        doc["seernet"]["field_scale"] = scale["kept"] or None
        rows = scaled_rows(rows, {m: fs["factor"] for m, fs in scale["kept"].items()})
    out = widen(unc["intervals"], rows)
    unc["intervals"] = out["intervals"]
    warnings = real_model_warnings(unc, rows)
    if warnings is not None:
        unc["disagreement"]["calibration"]["real_models"] = {
            **warnings["record"], "export_thresholds": unc["disagreement"]["thresholds"]}
        unc["disagreement"]["thresholds"] = warnings["thresholds"]
    unc["calibration"]["real_models"] = {
        "checks": [str(f) for f in checks], "rows": len(rows),
        "left_out_models": sorted(set(exclude) & names),
        "bins": out["record"],
        "field_scale": scale["record"] if scale is not None else None,
        "method": "per metric and bin (distance score, batch group): union of the shipped conformal "
                  "interval and the split-conformal interval of the checks' log(measured/predicted) "
                  "(over floor + |gap| for a disagreement-scaled metric), "
                  f"predicted with the field scale if any (a bin with < {MIN_BIN} check residuals takes "
                  "those of its batch group, else all of the metric's)"}
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
    ap.add_argument("--field-scale-checks", nargs="*", type=Path, default=[], metavar="FILE",
                    help="user-check files measured after the labels, predicted by this predictor: "
                         "fit the field scale on them (module doc)")
    a = ap.parse_args(argv)
    try:
        rec = recalibrate(a.predictor, a.checks, trained_models(a.training_data), a.field_scale_checks)
    except (RecalibrationError, ManifestError, DatasetError, OSError, json.JSONDecodeError) as exc:
        print(f"recalibrate: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(rec, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
