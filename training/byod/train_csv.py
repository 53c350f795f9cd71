"""``python -m training.byod train``: a CSV of measurements -> a shipped predictor.

Steps: read and check the CSV (:mod:`training.byod.table`), resolve every
model entry (ONNX path or zoo spec), build the PerfGraphs (cached,
:mod:`training.byod.graphs`), fit one SeerNet per metric on the training
rows (:mod:`training.byod.fit`), score the test rows, export
``seernet.onnx`` (normalization baked in) with ``manifest.json`` and
``report.md`` into the output folder.

Default split when no rows are given: by architecture, the architectures
whose id hash falls in the first 20 % are the test rows.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy.stats import spearmanr

from training.byod.errors import ByodError
from training.byod.fit import FittedPredictor, fit_seernet, in_validation
from training.byod.graphs import GraphCache, ModelRef, graphs_for, resolve
from training.byod.table import Measurements, parse_rows, read_csv
from training.seernet.data import dataset_summary
from training.seernet.evaluate import metric_unit, score
from training.seernet.export import export_seernet
from training.seernet.manifest import model_entry, write_manifest
from training.seernet.sample import GraphSample, from_perfgraph
from training.seernet.train import TrainConfig

DEVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
TEST_FRACTION = 0.2


@dataclass
class TrainOutcome:
    out: Path
    manifest: dict
    accuracy: dict
    seconds: dict


def resolve_models(meas: Measurements, model_column: str) -> list[ModelRef]:
    """A :class:`ModelRef` per row; the first bad entry raises with its row."""
    base = meas.path.parent
    memo: dict[str, ModelRef] = {}
    refs = []
    for text, row in zip(meas.models, meas.row_numbers):
        if text not in memo:
            try:
                memo[text] = resolve(text, base)
            except FileNotFoundError as exc:
                raise ByodError(f"{meas.path}: row {row} (line {row + 1}), column {model_column!r}: "
                                f"{exc}") from None
            except ValueError as exc:  # zoo SpecError
                raise ByodError(f"{meas.path}: row {row} (line {row + 1}), column {model_column!r}: "
                                f"unknown model spec {text!r}: {exc}") from None
        refs.append(memo[text])
    return refs


def select_rows(meas: Measurements, refs: Sequence[ModelRef], train_rows: str | None,
                test_rows: str | None) -> tuple[list[int], list[int]]:
    """0-based positions of the training and test rows (see module doc)."""
    n = len(meas)
    # Row specs count data rows of the file; map them to positions (blank lines were skipped).
    pos_of = {r: i for i, r in enumerate(meas.row_numbers)}
    last = meas.row_numbers[-1]

    def pick(spec: str, option: str) -> list[int]:
        rows = [r + 1 for r in parse_rows(spec, last, option)]
        return [pos_of[r] for r in rows if r in pos_of]

    if train_rows is not None and test_rows is not None:
        train, test = pick(train_rows, "--train-rows"), pick(test_rows, "--test-rows")
        both = sorted(set(train) & set(test))
        if both:
            row = meas.row_numbers[both[0]]
            raise ByodError(f"row {row} is in both --train-rows and --test-rows")
    elif train_rows is not None:
        train = pick(train_rows, "--train-rows")
        test = sorted(set(range(n)) - set(train))
    elif test_rows is not None:
        test = pick(test_rows, "--test-rows")
        train = sorted(set(range(n)) - set(test))
    else:
        test = [i for i in range(n) if in_validation(refs[i].arch_id, TEST_FRACTION, seed=1)]
        train = [i for i in range(n) if i not in set(test)]
    if not train:
        raise ByodError("no training rows selected")
    return train, test


def build_samples(meas: Measurements, refs: Sequence[ModelRef], positions: Sequence[int],
                  cache: GraphCache, label: str) -> list[GraphSample]:
    """GraphSamples of the rows at ``positions`` (rows without any metric are skipped)."""
    keep = [i for i in positions if any(np.isfinite(meas.metrics[m][i]) for m in meas.metrics)]
    graphs = graphs_for([refs[i] for i in keep], [meas.batches[i] for i in keep], cache, label)
    out = []
    for i, g in zip(keep, graphs):
        targets = {m: v[i] for m, v in meas.metrics.items() if np.isfinite(v[i])}
        out.append(from_perfgraph(g, targets, arch_id=refs[i].arch_id, family=refs[i].family,
                                  batch=meas.batches[i], key=f"row{meas.row_numbers[i]}"))
    return out


def evaluate(fitted: FittedPredictor, samples: Sequence[GraphSample]) -> dict:
    """metric -> {mape, within_10, median_ape, spearman, count} on ``samples``."""
    if not samples:
        return {}
    pred = fitted.predict(samples)
    out = {}
    for j, m in enumerate(fitted.metrics):
        true = np.array([s.targets.get(m, np.nan) for s in samples])
        ok = np.isfinite(true)
        s = score(pred[ok, j], true[ok])
        s["spearman"] = float(spearmanr(pred[ok, j], true[ok]).statistic) if ok.sum() > 1 else None
        out[m] = s
    return out


def train_from_csv(csv: str | Path, model_column: str, metrics: Sequence[str], device: str, *,
                   batch_column: str | None = None, batch: int | None = None,
                   train_rows: str | None = None, test_rows: str | None = None,
                   out: str | Path | None = None, cfg: TrainConfig | None = None,
                   cache: GraphCache | None = None, description: str | None = None,
                   model_format: str = "{}", command: str = "") -> TrainOutcome:
    """Everything ``python -m training.byod train`` does (see the module doc)."""
    if not DEVICE_NAME.match(device):
        raise ByodError(f"bad device name {device!r}: use letters, digits, '_', '-', '.' "
                        "(it names the folder and the --device of perfseer-rt predict)")
    cfg = cfg or TrainConfig()
    cache = cache or GraphCache()
    out = Path(out) if out else Path("exported_models") / device
    t0 = time.perf_counter()
    meas = read_csv(csv, model_column, metrics, batch_column, batch)
    if model_format != "{}":
        if model_format.count("{}") != 1:
            raise ByodError(f"--model-format {model_format!r} must contain '{{}}' once (where the cell goes)")
        meas.models = [model_format.replace("{}", m) for m in meas.models]
    refs = resolve_models(meas, model_column)
    train_pos, test_pos = select_rows(meas, refs, train_rows, test_rows)
    t1 = time.perf_counter()
    train = build_samples(meas, refs, train_pos, cache, "train graphs")
    test = build_samples(meas, refs, test_pos, cache, "test graphs")
    if not train:
        raise ByodError("no training row has a measured value")
    for m in metrics:
        if not any(m in s.targets for s in train):
            raise ByodError(f"metric {m!r}: no training row has a value")
    t2 = time.perf_counter()
    fitted = fit_seernet(train, metrics, cfg, desc=device)
    t3 = time.perf_counter()
    acc = evaluate(fitted, test)
    out.mkdir(parents=True, exist_ok=True)
    path = export_seernet(fitted.model, fitted.norm, out / "seernet.onnx", fitted.metrics)
    entry = model_entry(path, "seernet", fitted.metrics, fitted.parameters,
                        kind="SeerNet, one per metric" if len(fitted.metrics) > 1 else "SeerNet")
    summary = dataset_summary(train, fitted.metrics)
    summary.update({"source_csv": str(Path(csv)), "train_rows": len(train),
                    "validation_rows": fitted.counts.get("val", 0), "test_rows": len(test)})
    accuracy = {"test": {"seernet": {m: {k: acc[m].get(k) for k in ("mape", "within_10", "spearman", "count")}
                                     for m in acc}}} if acc else {}
    t4 = time.perf_counter()
    seconds = {"read_and_resolve": t1 - t0, "graphs": t2 - t1, "train": t3 - t2,
               "evaluate_and_export": t4 - t3, "total": t4 - t0}
    manifest = write_manifest(
        out / "manifest.json", device=device,
        description=description or f"user-measured device {device!r} (from {Path(csv).name})",
        metrics=fitted.metrics, normalization=fitted.norm, models=[entry], training_data=summary,
        accuracy=accuracy, report={"command": command, "train_config": cfg.to_dict(),
                                   "epochs": {m: {"best": b, "run": r} for m, (b, r) in fitted.epochs.items()},
                                   "seconds": seconds, "graph_cache": str(cache.root)})
    (out / "report.md").write_text(_report_md(device, csv, fitted, summary, acc, seconds, command))
    return TrainOutcome(out, manifest, acc, seconds)


def _fmt(v, digits=2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _report_md(device, csv, fitted: FittedPredictor, summary, acc, seconds, command) -> str:
    lines = [f"# Predictor for `{device}`", "",
             f"Trained from `{csv}` by `{command or 'train_from_csv'}`.", "",
             f"- SeerNet (paper 001), one per metric, {fitted.parameters:,} parameters, "
             "targets in log space; normalization baked into `seernet.onnx`.",
             f"- Training rows: {summary['train_rows']} ({fitted.counts.get('train', 0)} fit, "
             f"{fitted.counts.get('val', 0)} validation slice for early stopping); "
             f"test rows: {summary['test_rows']}.",
             f"- Architectures: {summary['architectures']}; batch sizes: {summary['batch_sizes']}; "
             f"families: {summary['families']}.",
             "- Epochs (best/run): " + ", ".join(f"{m} {b}/{r}" for m, (b, r) in fitted.epochs.items()),
             f"- Time: graphs {seconds['graphs']:.0f} s, training {seconds['train']:.0f} s, "
             f"total {seconds['total']:.0f} s.", "", "## Test accuracy", ""]
    if acc:
        lines += ["| metric | unit | count | MAPE % | within +-10 % | Spearman |", "|---|---|---|---|---|---|"]
        for m, s in acc.items():
            lines.append(f"| {m} | {metric_unit(m)} | {s['count']} | {_fmt(s['mape'])} | "
                         f"{_fmt(s['within_10'], 1)} | {_fmt(s['spearman'], 3)} |")
    else:
        lines.append("No test rows were selected.")
    lines += ["", "Use it: `perfseer-rt predict MODEL.onnx --device " + device + "` (with this folder "
              "under `exported_models/`)."]
    return "\n".join(lines) + "\n"
