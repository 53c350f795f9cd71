"""Train SeerNet, SeerNet-Multi and every baseline; evaluate; write a report.

    python -m training.seernet.report --dataset DIR [DIR ...] --out REPORTDIR \\
        [--metrics latency_ms peak_mem_mb ...] [--models seernet gbm ...] \\
        [--splits arch family] [--epochs N] [--threads N] [--seed S] \\
        [--joint-baselines] [--export-dir exported_models/<device>] [--device NAME]

For each split (``arch``: the architecture split of the dataset;
``family``: the family-held-out split) the normalization is fitted on that
split's training graphs, every model is trained on train with early stopping
on val, and scored on test in the metrics' units: MAPE and the share of
predictions within +-10 %. Single-metric models (SeerNet and, unless
``--joint-baselines``, every baseline) get one model per metric, as in paper
001; SeerNet-Multi is one model for all metrics, trained with PCGrad.

Writes ``REPORTDIR/report.md``, ``report.json``, ``plots/<split>_<metric>.png``
and (unless ``--no-checkpoints``) ``checkpoints/<split>/<model>[__<metric>].pt``.
With ``--export-dir``, the SeerNets of the arch split are exported to ONNX
there (``seernet.onnx``: the per-metric SeerNets in one file;
``seernet_multi.onnx``) with a ``manifest.json``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from perfseer_rt.predict import uncertainty as ru
from perfseer_rt.predict.manifest import MemoryParts
from training.dataset.card import drift
from training.seernet import data, ensemble, models
from training.seernet import uncertainty as unc
from training.seernet.baselines.gbm import SCALES, GlobalGBM
from training.seernet.evaluate import metric_unit, score
from training.seernet.normalization import Normalization
from training.seernet.plots import plot_predictions
from training.seernet.report_export import BLEND, OOD_K, SHIPPABLE, export, mode_and_step, parameters
from training.seernet.report_markdown import fmt, markdown
from training.seernet.train import (
    PreparedSet,
    TrainConfig,
    load_checkpoint,
    predict_z,
    prepare,
    save_checkpoint,
    set_seed,
    train_model,
)

#: The split whose models ship, in order of preference.
SHIP_SCHEMES = ("real", "arch")
#: Name of the refit on every graph of the shipped split (``--ship-all``).
ALL = "all"
#: MAPE points (validation) by which the direct peak head must beat the
#: larger-phase combination to ship instead of it.
MAX_COMBINE_SLACK_PCT = 2.0
#: Share of measurements the shipped intervals are meant to hold.
COVERAGE = 0.9


def run_report(dataset: data.DatasetPaths, out: str | Path, metrics: Sequence[str] | None = None,
               model_names: Sequence[str] = models.MODEL_NAMES, splits: Sequence[str] = ("arch", "family"),
               cfg: TrainConfig | None = None, joint_baselines: bool = False,
               export_dir: str | Path | None = None, device: str | None = None,
               checkpoints: bool = True, command: str = "", resume: bool = False,
               export_device: str | None = None, ship_all: bool = False) -> dict:
    """Everything the CLI does; returns the report dict (also in report.json).

    With ``ship_all``, the shipped model is trained once more on the shipped
    split's training and test graphs together (:func:`_refit_on_all`)."""
    cfg = cfg or TrainConfig()
    out = Path(out)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    unknown = [m for m in model_names if m not in models.MODEL_NAMES]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; choose from {', '.join(models.MODEL_NAMES)}")
    samples = data.load_samples(dataset, metrics, device)
    if not samples:
        raise SystemExit(f"{dataset}: no successful records" + (f" for device {device!r}" if device else ""))
    metrics = list(metrics) if metrics else data.available_metrics(samples)
    for m in metrics:
        metric_unit(m)  # every metric must carry its unit
    records = data.read_records(dataset)
    ok_records = [r for r in records if r.get("status") == "ok" and (device is None or r.get("device") == device)]
    mode, step = mode_and_step(ok_records)
    report: dict = {
        "dataset": ", ".join(str(d) for d in data.dataset_dirs(dataset)), "command": command,
        "device": device, "mode": mode, "step": step,
        "metrics": [{"name": m, "unit": metric_unit(m)} for m in metrics],
        "data": data.dataset_summary(samples, metrics),
        "noise_floor": noise_floor(records, metrics),
        "train_config": cfg.to_dict(), "joint_baselines": joint_baselines, "splits": {},
    }
    runs: dict = {}
    for scheme in splits:
        if not data.has_split(samples, scheme):
            report["splits"][scheme] = {"skipped": f"records carry no usable split_{scheme} with a test part"}
            continue
        parts = data.split_samples(samples, scheme)
        result, trained, norm = _run_split(scheme, parts, metrics, model_names, cfg, joint_baselines,
                                           out / "checkpoints" / scheme if checkpoints else None, resume)
        report["splits"][scheme] = result
        _plots(out / "plots", scheme, parts["test"], metrics, result, trained)
        runs[scheme] = {"norm": norm, "trained": trained, "parts": parts, "result": result}
    # The shipped model: trained on the real-model split (it never saw the
    # held-out published groups, so its report there is honest), else arch.
    ship_scheme = next((s for s in SHIP_SCHEMES if s in runs and any(runs[s]["trained"].get(n) for n in SHIPPABLE)),
                       None)
    shipped = runs.get(ship_scheme, {}) if ship_scheme else {}
    if shipped and ship_scheme:
        shipped["scheme"] = ship_scheme
        shipped["default"] = _default_model(report, shipped)
        shipped.update(_calibrate(runs, ship_scheme, shipped["default"], metrics))
        if ship_all:
            shipped = _refit_on_all(shipped, metrics, model_names, cfg, joint_baselines,
                                    out / "checkpoints" / ALL if checkpoints else None, resume)
            report["refit_on_all"] = {k: shipped["result"][k] for k in ("sizes", "architectures")}
        report["shipped"] = {k: shipped[k] for k in ("scheme", "refit", "default", "memory_combine",
                                                     "uncertainty", "held_out") if k in shipped}
    report["summary_table"] = _summary(report, metrics)
    if export_dir is not None and shipped:
        report["export"] = export(Path(export_dir), shipped, metrics, report, device, ok_records,
                                  export_device)
    (out / "report.json").write_text(json.dumps(_strip(report), indent=1) + "\n")
    (out / "report.md").write_text(markdown(report, metrics))
    return report


# ------------------------------------------------------- shipped predictor
def _refit_on_all(shipped: dict, metrics: list[str], model_names: Sequence[str], cfg: TrainConfig,
                  joint: bool, ckpt_dir: Path | None, resume: bool) -> dict:
    """The shipped split's models trained again on its training and test
    graphs together (the same validation graphs for early stopping and the
    blend), keeping everything that split measured: its accuracy, default
    model, memory combination, intervals, warning threshold and the
    distance reference (the split's training graphs). The refit has seen
    the held-out groups, so the split's held-out figures and intervals are
    conservative for it; its own scores on those graphs are in-sample and
    never reported as accuracy."""
    parts = shipped["parts"]
    every = {"train": list(parts["train"]) + list(parts["test"]), "val": parts["val"], "test": parts["test"]}
    result, trained, norm = _run_split(ALL, every, metrics, model_names, cfg, joint, ckpt_dir, resume)
    return {**shipped, "refit": ALL, "norm": norm, "trained": trained, "result": result, "parts": every}


def _truth(samples: Sequence, metrics: Sequence[str]) -> np.ndarray:
    return np.array([[s.targets.get(m, np.nan) for m in metrics] for s in samples],
                    dtype=np.float64).reshape(len(samples), len(metrics))


def _default_model(report: dict, shipped: dict) -> str:
    """The shipped model with the lowest mean MAPE on the architecture split's
    test set (a split apart from the real-model check), else the first."""
    names = [n for n in SHIPPABLE if shipped["trained"].get(n)]
    arch = report["splits"].get("arch", {}).get("models", {})
    return min(names, key=lambda n: arch.get(n, {}).get("mean_mape") or float("inf"))


def _calibrate(runs: dict, scheme: str, default: str, metrics: list[str]) -> dict:
    """Memory combination, distance score, intervals and the warning for the
    shipped model (:mod:`training.seernet.uncertainty`), checked on the
    shipped split's test set."""
    sh = runs[scheme]
    parts, res = sh["parts"], sh["result"]
    val_true, val_pred = _truth(parts["val"], metrics), res["val_predictions"][default]
    mode = "direct"
    if all(m in metrics for m in ("peak_mem_mb", "load_peak_mb", "run_peak_mb")):
        i = metrics.index("peak_mem_mb")
        direct = score(val_pred[:, i], val_true[:, i])["mape"]
        by_max = score(unc.combine_memory(val_pred, metrics, "max")[:, i], val_true[:, i])["mape"]
        # "max" keeps the parts consistent with the peak (peak = the larger
        # phase); the direct head ships only if clearly more accurate.
        mode = "direct" if by_max is not None and direct is not None \
            and direct < by_max - MAX_COMBINE_SLACK_PCT else "max"
    train_raw = unc.raw_features(parts["train"])
    mean, std = ru.fit_standardization(train_raw)
    memory = MemoryParts("peak_mem_mb", "load_peak_mb", "run_peak_mb", mode, None, "") \
        if all(m in metrics for m in ("peak_mem_mb", "load_peak_mb", "run_peak_mb")) else None
    blend = default == BLEND

    def pset(name: str, samples: Sequence, pred: np.ndarray, reference_raw: np.ndarray,
             parts_pred: dict | None = None):
        """``parts_pred``: the blend's two models' predictions (``seernet``, ``gbm``) on ``samples``."""
        combined = unc.combine_memory(pred, metrics, mode)
        gaps = ru.phase_gaps(ensemble.gap(parts_pred["seernet"], parts_pred["gbm"]), combined, metrics, memory) \
            if blend and parts_pred else None
        return unc.PredictionSet(name, _truth(samples, metrics), combined,
                                 unc.scores_against(samples, reference_raw, mean, std, OOD_K),
                                 np.array([s.batch for s in samples], dtype=np.int64), gaps)

    def preds(result: dict) -> dict:
        return {k: result["models"][k]["predictions"] for k in ("seernet", "gbm") if k in result["models"]}

    sets = [pset(f"{scheme} split validation architectures", parts["val"], val_pred, train_raw,
                 {k: res["val_predictions"][k] for k in ("seernet", "gbm") if k in res["val_predictions"]})]
    fam = runs.get("family")
    if fam and default in fam["result"]["models"] and scheme != "family":
        sets.append(pset("held-out families (family-split model)", fam["parts"]["test"],
                         fam["result"]["models"][default]["predictions"],
                         unc.raw_features(fam["parts"]["train"]), preds(fam["result"])))
    section = unc.calibrate(sets, metrics, COVERAGE, gap_model=BLEND if blend else None,
                            gap_output=ensemble.GAP_OUTPUT)
    test = pset(f"{scheme} split test", parts["test"], res["models"][default]["predictions"], train_raw,
                preds(res))
    held_out = unc.evaluate(section, test, metrics)
    held_out["split"] = scheme
    held_out["accuracy"] = {m: {"all": score(test.pred[:, j], test.true[:, j]),
                                "by_batch": {int(b): score(test.pred[test.batches == b, j],
                                                           test.true[test.batches == b, j])
                                             for b in sorted(set(test.batches.tolist()))}}
                            for j, m in enumerate(metrics)}
    section["calibration"]["held_out"] = {
        "split": scheme, "coverage": {m: c["held"] for m, c in held_out["coverage"].items()},
        "warning": held_out["warning"], "any_warning": held_out["any_warning"]}
    if section["disagreement"] is not None:
        section["disagreement"]["calibration"]["held_out"] = held_out.get("disagreement_warning")
    return {"memory_combine": mode, "uncertainty": section, "held_out": held_out,
            "reference": ru.standardize(train_raw, mean, std).astype(np.float32),
            "ood_mean": mean, "ood_std": std}


# ----------------------------------------------------------------- one split
def _run_split(scheme: str, parts: dict, metrics: list[str], model_names: Sequence[str],
               cfg: TrainConfig, joint: bool, ckpt_dir: Path | None, resume: bool = False):
    train_metrics = [m for m in metrics if any(m in s.targets for s in parts["train"])]
    norm = Normalization.fit(parts["train"], train_metrics)
    ps = {k: prepare(v, norm, train_metrics) for k, v in parts.items()}
    test_true = _truth(parts["test"], metrics)
    result_val: dict[str, np.ndarray] = {}
    result: dict = {
        "sizes": {k: len(v) for k, v in parts.items()},
        "architectures": {k: len({s.arch_id for s in v}) for k, v in parts.items()},
        "test_families": sorted({s.family for s in parts["test"]}),
        "test_groups": sorted({f"{s.family}/{s.extra.get('group')}" for s in parts["test"]
                               if s.extra.get("group")}),
        "models": {},
    }
    trained: dict = {}
    for name in model_names:
        t0 = time.perf_counter()
        if name in models.NON_TORCH:
            gbm, pred_z, val_z = _fit_gbm(parts, ps, cfg, norm, train_metrics)
            info: dict[str, dict] = {}
            modules: dict[str, object] = {"gbm": gbm}
        else:
            groups = [train_metrics] if (name in models.MULTI_METRIC or (joint and name != "seernet")) \
                else [[m] for m in train_metrics]
            pred_z = np.full((len(ps["test"]), len(train_metrics)), np.nan)
            val_z = np.full((len(ps["val"]), len(train_metrics)), np.nan)
            info, modules = {}, {}
            for group in groups:
                tag = "+".join(group)
                ckpt = None if ckpt_dir is None else \
                    ckpt_dir / f"{name}{'' if len(groups) == 1 else f'__{tag}'}.pt"
                run_cfg = _run_config(name, cfg)
                found = _resumable(ckpt, scheme, name, group, norm, run_cfg) if resume else None
                if found is not None:
                    model, info[tag] = found
                    if cfg.progress:
                        print(f"[{scheme}] {models.DISPLAY[name]} {tag}: resumed from {ckpt}", file=sys.stderr)
                else:
                    model, res, config = _fit_torch(name, group, ps, norm, run_cfg, f"{scheme}/{name}/{tag}")
                    info[tag] = {"parameters": parameters(model), "epochs": res.epochs_run,
                                 "best_epoch": res.best_epoch, "best_val_loss": res.best_val,
                                 "seconds_per_epoch": res.seconds / max(res.epochs_run, 1),
                                 "pcgrad": run_cfg.pcgrad}
                    if ckpt is not None:
                        save_checkpoint(ckpt, name, config, model, norm, group, run_cfg, split=scheme,
                                        history=res.history, run=info[tag])
                cols = [train_metrics.index(m) for m in group]
                pred_z[:, cols] = predict_z(model, ps["test"], cfg.eval_batch_size)
                if name in SHIPPABLE and len(ps["val"]):  # the blend and the calibration read them
                    val_z[:, cols] = predict_z(model, ps["val"], cfg.eval_batch_size)
                modules[tag] = model
        pred = _decode(norm, pred_z, train_metrics, metrics)
        result_val[name] = _decode(norm, val_z, train_metrics, metrics)
        result["models"][name] = _scored(models.DISPLAY[name], pred, test_true, parts["test"], metrics,
                                         parameters=sum(v["parameters"] for v in info.values()) if info else None,
                                         train_seconds=time.perf_counter() - t0, runs=info)
        trained[name] = modules
        _progress(cfg, scheme, result["models"][name])
    if "seernet" in trained and "gbm" in trained and len(parts["val"]):
        val_true = _truth(parts["val"], metrics)
        weights = ensemble.choose_weights(result_val["seernet"], result_val["gbm"], val_true)
        blended = ensemble.blend(result["models"]["seernet"]["predictions"], result["models"]["gbm"]["predictions"],
                                 weights)
        result_val[BLEND] = ensemble.blend(result_val["seernet"], result_val["gbm"], weights)
        display = "SeerNet + GBM (" + ", ".join(f"{m} {w:g}" for m, w in zip(metrics, weights)) + ")"
        result["models"][BLEND] = _scored(display, blended, test_true, parts["test"], metrics,
                                          parameters=result["models"]["seernet"]["parameters"],
                                          train_seconds=0.0, runs={}, weights=dict(zip(metrics, weights)))
        trained[BLEND] = {"weights": weights}
        _progress(cfg, scheme, result["models"][BLEND])
    result["val_predictions"] = {k: v for k, v in result_val.items() if k in SHIPPABLE or k == "gbm"}
    return result, trained, norm


def _scored(display: str, pred: np.ndarray, true: np.ndarray, test: Sequence, metrics: list[str],
            **extra) -> dict:
    """One model's entry in a split's results: test scores, per batch size, predictions."""
    scores = {m: score(pred[:, i], true[:, i]) for i, m in enumerate(metrics)}
    mapes = [s["mape"] for s in scores.values() if s["mape"] is not None]
    return {"display": display, **extra, "metrics": scores, "mean_mape": float(np.mean(mapes)) if mapes else None,
            "per_batch": per_batch_scores(pred, true, [s.batch for s in test], metrics), "predictions": pred}


def _progress(cfg: TrainConfig, scheme: str, r: dict) -> None:
    if cfg.progress:
        shown = ", ".join(f"{m} {s['mape']:.2f}%" for m, s in r["metrics"].items() if s["mape"] is not None)
        print(f"[{scheme}] {r['display']}: MAPE {shown} ({r['train_seconds']:.0f} s)", file=sys.stderr)


def _decode(norm: Normalization, pred_z: np.ndarray, train_metrics: list[str],
            metrics: list[str]) -> np.ndarray:
    """Standardized log predictions of ``train_metrics`` -> ``[G, len(metrics)]``
    in metric units (NaN for a metric the split could not train)."""
    pred = np.full((len(pred_z), len(metrics)), np.nan)
    if len(pred_z):
        pred[:, [metrics.index(m) for m in train_metrics]] = norm.decode_targets(pred_z, train_metrics)
    return pred


def per_batch_scores(pred: np.ndarray, true: np.ndarray, batches: Sequence[int],
                     metrics: Sequence[str]) -> dict[str, dict[str, dict]]:
    """``batch -> metric -> score`` (:func:`score`) of the test configurations
    of each batch size: whether the predictor learned how a metric grows with
    the batch shows here, not in the pooled MAPE."""
    by = np.asarray(batches)
    return {str(b): {m: score(pred[by == b, i], true[by == b, i])
                     for i, m in enumerate(metrics)}
            for b in sorted(set(by.tolist()))}


def _run_config(name: str, cfg: TrainConfig) -> TrainConfig:
    """The settings model ``name`` trains with: PCGrad for SeerNet-Multi only."""
    return TrainConfig(**{**cfg.to_dict(), "pcgrad": name in models.MULTI_METRIC})


def _fit_torch(name: str, group: list[str], ps: dict, norm: Normalization, run_cfg: TrainConfig, desc: str):
    set_seed(run_cfg.seed)
    train, val = ps["train"].select(group), ps["val"].select(group)
    config = models.default_config(name, group, norm, train.samples)
    model = models.build(name, config)
    res = train_model(model, train, val if len(val) else train, run_cfg, desc=desc)
    return res.model, res, config


_NOT_COMPARED = ("progress", "threads")


def _resumable(path: Path | None, scheme: str, name: str, group: list[str], norm: Normalization,
               run_cfg: TrainConfig):
    """``(model, run info)`` from a checkpoint that this run would reproduce
    (same split, model, metrics, normalization and training settings), else None."""
    if path is None or not path.is_file():
        return None
    model, ck_norm, ck_metrics, raw = load_checkpoint(path)
    same_cfg = {k: v for k, v in raw.get("train_config", {}).items() if k not in _NOT_COMPARED} == \
        {k: v for k, v in run_cfg.to_dict().items() if k not in _NOT_COMPARED}
    same_norm = json.dumps(ck_norm.to_dict(), sort_keys=True) == json.dumps(norm.to_dict(), sort_keys=True)
    if (raw.get("split") != scheme or raw.get("model") != name or ck_metrics != list(group)
            or not same_cfg or not same_norm or "run" not in raw):
        return None
    return model, raw["run"]


def _fit_gbm(parts: dict, ps: dict[str, PreparedSet], cfg: TrainConfig, norm: Normalization,
             metrics: list[str]):
    """The GBM fitted on the raw float32 global features (trees need no
    normalization, and so it exports exactly: :mod:`.ensemble`) against the
    standardized log targets of ``metrics``, each relative to its scale
    (:class:`GlobalGBM`: time per FLOP, memory per byte); returns ``(gbm, test pred, val pred)``, both
    standardized."""
    width = ps["train"].targets.shape[1]

    def u(part: str) -> np.ndarray:
        return np.stack([np.asarray(s.u, np.float32) for s in parts[part]]) if parts[part] else np.zeros((0, 0))

    def pred(part: str) -> np.ndarray:
        return gbm.predict(u(part)) if parts[part] else np.zeros((0, width))

    gbm = GlobalGBM(seed=cfg.seed, offset_scale=[1.0 / norm.target_std[m] if m in SCALES else 0.0
                                                 for m in metrics], metrics=metrics)
    val = ps["val"]
    gbm.fit(u("train"), ps["train"].targets, u("val") if len(val) else None, val.targets if len(val) else None)
    return gbm, pred("test"), pred("val")


# --------------------------------------------------------------------- output
def _plots(folder: Path, scheme: str, test: list, metrics: list[str], result: dict, trained: dict) -> None:
    true = _truth(test, metrics)
    for i, m in enumerate(metrics):
        panels = {r["display"]: (true[:, i], r["predictions"][:, i], r["metrics"][m]["mape"])
                  for r in result["models"].values()}
        plot_predictions(folder / f"{scheme}_{m}.png", f"{scheme} split, test: {m}", metric_unit(m), panels)


def _summary(report: dict, metrics: list[str]) -> list[dict]:
    rows = []
    for scheme, res in report["splits"].items():
        for name, r in res.get("models", {}).items():
            rows.append({"split": scheme, "model": name, "mean_mape": r["mean_mape"],
                         **{f"{m}.mape": r["metrics"][m]["mape"] for m in metrics},
                         **{f"{m}.within_10": r["metrics"][m]["within_10"] for m in metrics}})
    return rows


def noise_floor(records: Sequence[dict], metrics: Sequence[str]) -> list[dict]:
    """The reference configurations re-measured during the campaign (the
    dataset card's :func:`training.dataset.card.drift`, by the first time
    metric): no accuracy figure can be read finer than their spread."""
    time_field = next((m for m in metrics if m.endswith("_ms")), None)
    return drift(list(records), time_field) if time_field else []


def _strip(obj):
    """report -> JSON: drop prediction arrays."""
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items()
                if k not in ("predictions", "val_predictions") and not isinstance(v, np.ndarray)}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    return obj


# ------------------------------------------------------------------------ CLI
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.seernet.report",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", required=True, nargs="+", metavar="DIR",
                   help="dataset folder (records/*.jsonl, graphs/*.npz); several are read as one")
    p.add_argument("--out", required=True, help="report folder to write")
    p.add_argument("--metrics", nargs="+", help="metrics to predict (default: all in the dataset)")
    p.add_argument("--models", nargs="+", default=list(models.MODEL_NAMES), choices=models.MODEL_NAMES,
                   metavar="NAME", help=f"models to train (default all: {' '.join(models.MODEL_NAMES)})")
    p.add_argument("--splits", nargs="+", default=list(data.SCHEMES), choices=list(data.SCHEMES))
    p.add_argument("--device", help="use only records of this device; also the exported device name")
    p.add_argument("--epochs", type=int, default=TrainConfig.epochs)
    p.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    p.add_argument("--lr", type=float, default=TrainConfig.lr)
    p.add_argument("--early-stop", type=int, default=TrainConfig.early_stop)
    p.add_argument("--weight-decay", type=float, default=TrainConfig.weight_decay,
                   help="Adam L2 penalty (default 0, as the paper)")
    p.add_argument("--seed", type=int, default=TrainConfig.seed)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--joint-baselines", action="store_true",
                   help="train each torch baseline once for all metrics (faster) instead of per metric")
    p.add_argument("--export-dir", help="export the arch-split SeerNets here with a manifest.json")
    p.add_argument("--export-device", default=None, metavar="NAME",
                   help="device name in the exported manifest (default: --device); e.g. the "
                        "inference device a training-step predictor (exported_models/<device>/train) "
                        "belongs to")
    p.add_argument("--ship-all", action="store_true",
                   help="ship the shipped split's models trained again on its train and test graphs "
                        "(its held-out figures and intervals are kept, conservative for the refit)")
    p.add_argument("--no-checkpoints", action="store_true")
    p.add_argument("--resume", action="store_true",
                   help="reuse a checkpoint under OUT/checkpoints/<split>/ when it was trained with the same "
                        "split, metrics, normalization and settings (a cut-off run, or splits run apart)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    a = p.parse_args(argv)
    cfg = TrainConfig(epochs=a.epochs, batch_size=a.batch_size, lr=a.lr, early_stop=a.early_stop,
                      weight_decay=a.weight_decay,
                      seed=a.seed, threads=a.threads, progress=not a.quiet)
    command = "python -m training.seernet.report " + " ".join(
        shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:]))
    try:
        report = run_report(a.dataset, a.out, a.metrics, a.models, a.splits, cfg, a.joint_baselines,
                            a.export_dir, a.device, not a.no_checkpoints, command, a.resume,
                            a.export_device, a.ship_all)
    except data.DatasetError as exc:
        print(f"report: error: {exc}", file=sys.stderr)
        return 2
    if not a.quiet:
        print(f"wrote {Path(a.out) / 'report.md'}", file=sys.stderr)
    for row in report["summary_table"]:
        print(f"{row['split']:7s} {row['model']:16s} mean MAPE {fmt(row['mean_mape'])} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
