"""Train SeerNet, SeerNet-Multi and every baseline; evaluate; write a report.

    python -m training.seernet.report --dataset DIR --out REPORTDIR \\
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

from training.seernet import data, models
from training.seernet.evaluate import metric_unit, score
from training.seernet.normalization import Normalization
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


def run_report(dataset: str | Path, out: str | Path, metrics: Sequence[str] | None = None,
               model_names: Sequence[str] = models.MODEL_NAMES, splits: Sequence[str] = ("arch", "family"),
               cfg: TrainConfig | None = None, joint_baselines: bool = False,
               export_dir: str | Path | None = None, device: str | None = None,
               checkpoints: bool = True, command: str = "", resume: bool = False) -> dict:
    """Everything the CLI does; returns the report dict (also in report.json)."""
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
    report: dict = {
        "dataset": str(dataset), "command": command, "device": device,
        "metrics": [{"name": m, "unit": metric_unit(m)} for m in metrics],
        "data": data.dataset_summary(samples, metrics),
        "train_config": cfg.to_dict(), "joint_baselines": joint_baselines, "splits": {},
    }
    shipped: dict = {}
    for scheme in splits:
        if not data.has_split(samples, scheme):
            report["splits"][scheme] = {"skipped": f"records carry no usable split_{scheme} with a test part"}
            continue
        parts = data.split_samples(samples, scheme)
        result, trained, norm = _run_split(scheme, parts, metrics, model_names, cfg, joint_baselines,
                                           out / "checkpoints" / scheme if checkpoints else None, resume)
        report["splits"][scheme] = result
        _plots(out / "plots", scheme, parts["test"], metrics, result, trained)
        if scheme == "arch":
            shipped = {"norm": norm, "trained": trained}
    report["summary_table"] = _summary(report, metrics)
    if export_dir is not None and shipped:
        report["export"] = _export(Path(export_dir), shipped, metrics, report, device, dataset)
    (out / "report.json").write_text(json.dumps(_strip(report), indent=1) + "\n")
    (out / "report.md").write_text(_markdown(report, metrics))
    return report


# ----------------------------------------------------------------- one split
def _run_split(scheme: str, parts: dict, metrics: list[str], model_names: Sequence[str],
               cfg: TrainConfig, joint: bool, ckpt_dir: Path | None, resume: bool = False):
    train_metrics = [m for m in metrics if any(m in s.targets for s in parts["train"])]
    norm = Normalization.fit(parts["train"], train_metrics)
    ps = {k: prepare(v, norm, train_metrics) for k, v in parts.items()}
    test_true = np.array([[s.targets.get(m, np.nan) for m in metrics] for s in parts["test"]])
    result: dict = {
        "sizes": {k: len(v) for k, v in parts.items()},
        "architectures": {k: len({s.arch_id for s in v}) for k, v in parts.items()},
        "test_families": sorted({s.family for s in parts["test"]}),
        "models": {},
    }
    trained: dict = {}
    for name in model_names:
        t0 = time.perf_counter()
        if name in models.NON_TORCH:
            pred_z, info, modules = _fit_gbm(ps, cfg), {}, {}
        else:
            groups = [train_metrics] if (name in models.MULTI_METRIC or (joint and name != "seernet")) \
                else [[m] for m in train_metrics]
            pred_z = np.full((len(ps["test"]), len(train_metrics)), np.nan)
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
                    info[tag] = {"parameters": _params(model), "epochs": res.epochs_run,
                                 "best_epoch": res.best_epoch, "best_val_loss": res.best_val,
                                 "seconds_per_epoch": res.seconds / max(res.epochs_run, 1),
                                 "pcgrad": run_cfg.pcgrad}
                    if ckpt is not None:
                        save_checkpoint(ckpt, name, config, model, norm, group, run_cfg, split=scheme,
                                        history=res.history, run=info[tag])
                cols = [train_metrics.index(m) for m in group]
                pred_z[:, cols] = predict_z(model, ps["test"], cfg.eval_batch_size)
                modules[tag] = model
        pred = np.full((len(ps["test"]), len(metrics)), np.nan)
        if len(ps["test"]):
            pred[:, [metrics.index(m) for m in train_metrics]] = norm.decode_targets(pred_z, train_metrics)
        scores = {m: score(pred[:, i], test_true[:, i]) for i, m in enumerate(metrics)}
        mapes = [s["mape"] for s in scores.values() if s["mape"] is not None]
        result["models"][name] = {
            "display": models.DISPLAY[name],
            "parameters": (sum(v["parameters"] for v in info.values()) if info else None),
            "train_seconds": time.perf_counter() - t0,
            "metrics": scores, "mean_mape": float(np.mean(mapes)) if mapes else None,
            "runs": info, "predictions": pred,
        }
        trained[name] = modules
        if cfg.progress:
            shown = ", ".join(f"{m} {s['mape']:.2f}%" for m, s in scores.items() if s["mape"] is not None)
            print(f"[{scheme}] {models.DISPLAY[name]}: MAPE {shown} "
                  f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return result, trained, norm


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


def _fit_gbm(ps: dict, cfg: TrainConfig) -> np.ndarray:
    from training.seernet.baselines.gbm import GlobalGBM

    def u(p: PreparedSet) -> np.ndarray:
        return np.stack([s.u for s in p.samples]) if len(p) else np.zeros((0, 0))

    gbm = GlobalGBM(seed=cfg.seed)
    val = ps["val"]
    gbm.fit(u(ps["train"]), ps["train"].targets, u(val) if len(val) else None,
            val.targets if len(val) else None)
    return gbm.predict(u(ps["test"])) if len(ps["test"]) else np.zeros((0, ps["train"].targets.shape[1]))


def _params(model) -> int:
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


# --------------------------------------------------------------------- output
def _plots(folder: Path, scheme: str, test: list, metrics: list[str], result: dict, trained: dict) -> None:
    from training.seernet.plots import plot_predictions

    true = np.array([[s.targets.get(m, np.nan) for m in metrics] for s in test])
    true = true.reshape(len(test), len(metrics))
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


def _fmt(v, digits=2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def _markdown(report: dict, metrics: list[str]) -> str:
    d = report["data"]
    lines = ["# SeerNet and baselines: accuracy report", "",
             f"Dataset `{report['dataset']}`: {d['configurations']} configurations of "
             f"{d['architectures']} architectures; families "
             + ", ".join(f"{k} ({v})" for k, v in d["families"].items()) + ".", ""]
    if report.get("command"):
        lines += ["Reproduce with:", "", "```", report["command"], "```", ""]
    lines += ["MAPE and the share of predictions within +-10 % of the measurement, on the test part of "
              "each split, in the metrics' own units. Lower MAPE is better.", ""]
    for scheme, res in report["splits"].items():
        title = {"arch": "Architecture split", "family": "Family-held-out split"}.get(scheme, scheme)
        lines += [f"## {title}", ""]
        if "skipped" in res:
            lines += [f"Skipped: {res['skipped']}.", ""]
            continue
        sz, ar = res["sizes"], res["architectures"]
        lines += [f"train {sz['train']} / val {sz['val']} / test {sz['test']} configurations "
                  f"({ar['train']} / {ar['val']} / {ar['test']} architectures); test families: "
                  + ", ".join(res["test_families"]) + ".", ""]
        head = "| model | params | " + " | ".join(f"{m} MAPE % | {m} ±10 % share" for m in metrics) \
            + " | mean MAPE % |"
        lines += [head, "|" + "---|" * (3 + 2 * len(metrics))]
        ranked = sorted(res["models"].items(),
                        key=lambda kv: (kv[1]["mean_mape"] is None, kv[1]["mean_mape"]))
        for _name, r in ranked:
            cells = " | ".join(f"{_fmt(r['metrics'][m]['mape'])} | {_fmt(r['metrics'][m]['within_10'], 1)}"
                               for m in metrics)
            params = "trees" if r["parameters"] is None else f"{r['parameters']:,}"
            lines.append(f"| {r['display']} | {params} | {cells} | {_fmt(r['mean_mape'])} |")
        lines += ["", *(f"![{scheme} {m}](plots/{scheme}_{m}.png)" for m in metrics), ""]
    lines += ["## Settings", "", "```json", json.dumps(report["train_config"], indent=1), "```", "",
              "SeerNet-Multi trains with PCGrad (`pcgrad: true` for it alone; the settings above are the "
              "shared ones).", "",
              "Parameters are summed over the per-metric models of single-metric predictors. "
              "nn-Meter-style: per-node costs summed per graph, no kernel-fusion detection. "
              "Global GBM: gradient-boosted trees on the global features.", ""]
    return "\n".join(lines)


def _strip(obj):
    """report -> JSON: drop prediction arrays."""
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k != "predictions"}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    return obj


# --------------------------------------------------------------------- export
def _export(export_dir: Path, shipped: dict, metrics: list[str], report: dict, device: str | None,
            dataset) -> dict:
    from training.seernet.export import export_seernet
    from training.seernet.manifest import model_entry, write_manifest
    from training.seernet.seernet import StackedPredictor

    norm, trained = shipped["norm"], shipped["trained"]
    train_metrics = list(norm.metrics)
    entries = []
    if trained.get("seernet"):
        per_metric = trained["seernet"]
        stacked = StackedPredictor([per_metric[m] for m in train_metrics]) if len(per_metric) > 1 \
            else next(iter(per_metric.values()))
        path = export_seernet(stacked, norm, export_dir / "seernet.onnx", train_metrics)
        entries.append(model_entry(path, "seernet", train_metrics, _params(stacked),
                                   kind="SeerNet, one per metric"))
    if trained.get("seernet_multi"):
        multi = next(iter(trained["seernet_multi"].values()))
        path = export_seernet(multi, norm, export_dir / "seernet_multi.onnx", train_metrics)
        entries.append(model_entry(path, "seernet_multi", train_metrics, _params(multi),
                                   kind="SeerNet-Multi (PCGrad)"))
    accuracy = {scheme: {n: {m: {k: r["metrics"][m][k] for k in ("mape", "within_10", "count")}
                             for m in train_metrics} | {"mean_mape": r["mean_mape"]}
                         for n, r in res["models"].items() if n in ("seernet", "seernet_multi")}
                for scheme, res in report["splits"].items() if "models" in res}
    env = next((r.get("env") for r in data.read_records(dataset)
                if r.get("status") == "ok" and (device is None or r.get("device") == device)), None)
    name = device or export_dir.name
    arch = accuracy.get("arch", {})
    shipped_names = [e["name"] for e in entries]
    default = min(shipped_names, key=lambda n: arch.get(n, {}).get("mean_mape") or float("inf"))
    write_manifest(export_dir / "manifest.json", device=name, description=env or name,
                   metrics=train_metrics, normalization=norm, models=entries,
                   training_data=report["data"], accuracy=accuracy, default_model=default,
                   report={"command": report["command"]})
    return {"dir": str(export_dir), "files": [e["file"] for e in entries] + ["manifest.json"]}


# ------------------------------------------------------------------------ CLI
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.seernet.report",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", required=True, help="dataset folder (records/*.jsonl, graphs/*.npz)")
    p.add_argument("--out", required=True, help="report folder to write")
    p.add_argument("--metrics", nargs="+", help="metrics to predict (default: all in the dataset)")
    p.add_argument("--models", nargs="+", default=list(models.MODEL_NAMES), choices=models.MODEL_NAMES,
                   metavar="NAME", help=f"models to train (default all: {' '.join(models.MODEL_NAMES)})")
    p.add_argument("--splits", nargs="+", default=["arch", "family"], choices=["arch", "family"])
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
                            a.export_dir, a.device, not a.no_checkpoints, command, a.resume)
    except data.DatasetError as exc:
        print(f"report: error: {exc}", file=sys.stderr)
        return 2
    if not a.quiet:
        print(f"wrote {Path(a.out) / 'report.md'}", file=sys.stderr)
    for row in report["summary_table"]:
        print(f"{row['split']:7s} {row['model']:16s} mean MAPE {_fmt(row['mean_mape'])} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
