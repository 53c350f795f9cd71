"""``reports/gpu-learned/``: held-out accuracy of the learned layer against
the kernel prior, per source, GPU, precision, mode, layout and kind of
architecture (``cv.json`` with every label's predictions, ``README.md``).

    python -m training.gpulearned.report [reports/gpu-learned/cv.json]

renders ``README.md`` again from a ``cv.json`` (no fitting), adding the
tables computed from its rows (:func:`row_tables`) that an older run did
not write."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from perfseer_rt.gpu.predictor import BLEND_PRIOR_WEIGHT, blend
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.gpulearned.tables import Label

#: Share of held-out labels an interval is meant to hold.
COVERAGE = 0.8
#: The runtime's GPU models (``--model``) and the predictions standing for
#: each with the GPU held out.
MODELS = {"learned": "learned_logo", "prior": "prior", "blend": "blend_logo"}
FAMILY = "the families hashed into five folds"


def stats(pred: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """MAPE, median signed error, share within 10 / 20 % (all in %) and count."""
    ok = np.isfinite(pred)
    e = pred[ok] / y[ok] - 1.0
    if not len(e):
        return {"n": 0}
    return {"n": int(len(e)), "mape": round(100 * float(np.mean(np.abs(e))), 1),
            "median": round(100 * float(np.median(e)), 1),
            "within_10": round(100 * float(np.mean(np.abs(e) <= 0.10)), 1),
            "within_20": round(100 * float(np.mean(np.abs(e) <= 0.20)), 1)}


def breakdown(labels: Sequence[Label], y: np.ndarray, preds: dict[str, np.ndarray],
              key: Any) -> dict[str, dict[str, Any]]:
    idx: dict[str, list[int]] = defaultdict(list)
    for i, lab in enumerate(labels):
        idx[key(lab)].append(i)
    return {k: {name: stats(p[v], y[v]) for name, p in preds.items()} for k, v in sorted(idx.items())}


def row_tables(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """The breakdowns computed from ``cv.json``'s rows alone (their
    predictions as the rows round them): ``by_kind_layout``, every kind of
    architecture by layout and mode (channels-last is timm's only)."""
    y = np.array([r["measured_ms"] for r in rows])
    prior, logo, fam = (np.array([r[k] for r in rows]) for k in ("prior_ms", "logo_ms", "family_ms"))
    preds = {"prior": prior, "learned_logo": logo, "learned_family": fam,
             "blend_logo": blend(logo, prior), "blend_family": blend(fam, prior)}
    idx: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        idx[f"{r['kind']} {r['layout']} {r['mode']}"].append(i)
    return {"by_kind_layout": {k: {name: stats(p[v], y[v]) for name, p in preds.items()}
                               for k, v in sorted(idx.items())}}


def accuracy_block(cv: dict[str, Any]) -> dict[str, Any]:
    """What the exported layer says of its held-out accuracy (the runtime's
    ``accuracy``): overall leave-one-GPU-out and family-held-out MAPE, and
    the interval from the leave-one-GPU-out log errors."""
    o = cv["overall"]
    q = cv["interval"].get("by_mode") or {}
    by_mode = {mode: {name: {**b[key], **({"log_q": q[mode][name]} if name in q.get(mode, {}) else {})}
                      for name, key in MODELS.items() if key in b}
               for mode, b in (cv.get("by_mode") or {}).items()}
    return {"leave_one_gpu_out": o["learned_logo"], "family_held_out": o["learned_family"],
            "prior": o["prior"], **({"blend": o["blend_logo"]} if "blend_logo" in o else {}),
            "by_mode": by_mode, "log_q": cv["interval"]["log_q"], "coverage": COVERAGE,
            "meaning": "held-out whole-model error on public measurements by others "
                       "(reports/gpu-learned/README.md); interval: the 10th-90th percentile of "
                       "measured/predicted with the GPU held out"}


def write(out: Path, labels: Sequence[Label], y: np.ndarray, prior: np.ndarray, logo: np.ndarray,
          fam: np.ndarray, skipped: dict[str, int], cfgs: dict[str, Any], command: str) -> dict[str, Any]:
    """Write ``cv.json`` and ``README.md`` under ``out``; ``cfgs``: each
    mode's fit setting (its labels' held-out predictions come from a layer
    fitted so)."""
    preds = {"prior": prior, "learned_logo": logo, "learned_family": fam,
             "blend_logo": blend(logo, prior), "blend_family": blend(fam, prior)}
    modes = sorted({lab.mode for lab in labels})
    by_mode_q = {mode: {name: _log_q(preds[key], y, np.array([lab.mode == mode for lab in labels]))
                        for name, key in MODELS.items()} for mode in modes}
    doc = {"command": command, "fit": {mode: asdict(c) for mode, c in cfgs.items()}, "skipped": skipped,
           "ours": sum(lab.source == "ours" for lab in labels),
           "overall": {k: stats(p, y) for k, p in preds.items()},
           "interval": {"coverage": COVERAGE, "log_q": _log_q(logo, y, np.ones(len(y), bool)),
                        "by_mode": by_mode_q},
           "by_mode": breakdown(labels, y, preds, lambda lab: lab.mode),
           "by_source_mode_precision": breakdown(labels, y, preds,
                                                 lambda lab: f"{lab.source} {lab.mode} {lab.precision}"),
           "by_gpu": breakdown(labels, y, preds, lambda lab: f"{lab.gpu} {lab.source} {lab.mode}"),
           "by_kind": breakdown(labels, y, preds, lambda lab: f"{lab.kind} {lab.mode}"),
           "by_layout": breakdown(labels, y, preds, lambda lab: f"{lab.source} {lab.layout} {lab.mode}"),
           "rows": [{"model": Path(lab.onnx).stem, "gpu": lab.gpu, "batch": lab.batch, "mode": lab.mode,
                     "precision": lab.precision, "layout": lab.layout, "group": lab.group, "kind": lab.kind,
                     "source": lab.source, "measured_ms": lab.ms, "prior_ms": round(float(p), 4),
                     "logo_ms": round(float(a), 4), "family_ms": round(float(b), 4)}
                    for lab, p, a, b in zip(labels, prior, logo, fam)]}
    rows: list[dict[str, Any]] = doc["rows"]  # type: ignore[assignment]  # the list built just above
    doc.update(row_tables(rows))
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / "cv.json", (json.dumps(doc, indent=1) + "\n").encode())
    atomic_write_bytes(out / "README.md", markdown(doc).encode())
    return doc


def _log_q(pred: np.ndarray, y: np.ndarray, sel: np.ndarray) -> list[float]:
    """The central :data:`COVERAGE` range of log(measured / predicted) over ``sel``."""
    ok = sel & np.isfinite(pred) & (pred > 0)
    q = np.quantile(np.log(y[ok] / pred[ok]), [(1 - COVERAGE) / 2, (1 + COVERAGE) / 2])
    return [round(float(v), 4) for v in q]


def _powers(fit: dict[str, Any]) -> str:
    """How the report's fit setting weighted the labels, in words."""
    powers = {mode: c.get("group_power", 1.0) for mode, c in fit.items()} if "inference" in fit else {
        "inference": fit.get("group_power", 1.0), "train": fit.get("group_power", 1.0)}
    if len(set(powers.values())) == 1:
        return f"P = {powers['inference']:g}, one layer for both modes"
    return ("a layer per mode, both fitted on every label: inference answered by the one at P = "
            f"{powers['inference']:g}, training steps by the one at P = {powers['train']:g}")


def _cell(s: dict[str, Any]) -> str:
    return f"{s.get('mape', '-')} ({s.get('median', '-')})" if s.get("n") else "-"


def _table(title: str, block: dict[str, dict[str, Any]]) -> list[str]:
    lines = [f"\n### {title}\n", "| group | labels | prior MAPE | learned, GPU held out | "
             "learned, family held out | blend, GPU held out | blend, family held out | "
             "within 20 % (learned, GPU held out) |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for k, v in block.items():
        p, a = v["prior"], v["learned_logo"]
        lines.append(f"| {k} | {a.get('n', 0)} | {p.get('mape', '-')} | {_cell(a)} | {_cell(v['learned_family'])} | "
                     f"{_cell(v.get('blend_logo', {}))} | {_cell(v.get('blend_family', {}))} | "
                     f"{a.get('within_20', '-')} |")
    return lines


def default_models(doc: dict[str, Any]) -> dict[str, str]:
    """Per mode, the model a prediction takes by default: the lowest MAPE
    with the GPU held out (``perfseer_rt.gpu.entries.held_out_accuracy``
    reads the same figures from the exported record)."""
    return {mode: min(MODELS, key=lambda m: b.get(MODELS[m], {}).get("mape", float("inf")))
            for mode, b in doc.get("by_mode", {}).items()}


def markdown(doc: dict[str, Any]) -> str:
    o = doc["overall"]
    lines = ["# GPU latency: the learned whole-model layer against the kernel prior, held out\n",
             f"Regenerate: `{doc['command']}` (the cache holds the rebuilt models: "
             "`python -m training.publicgpu export --cache DIR`).\n",
             "**Data.** Whole-model latencies measured by others (`data/public-gpu`): timm's benchmark "
             "CSVs (RTX 3090 / RTX 4090, PyTorch 1.12-2.4 eager, AMP fp16, NCHW and channels-last, "
             "inference and SGD training steps) and NeuSight's five transformers (PyTorch 2.1 eager, fp32, "
             "eight NVIDIA GPUs, inference and forward + backward)"
             + ("; Lambda's logs of NVIDIA DeepLearningExamples training steps (ResNet-50, BERT-base/-large "
                "SQuAD; 16 GPUs, AMP/fp16 and TF32, materialised attention)"
                if any(r["source"] == "lambda" for r in doc["rows"]) else "") + (
                 f"; and {doc['ours']} records of our own (`data/gpu`, measured by us with the GPU window: "
                 "source `ours` below)." if doc.get("ours") else ". None of these numbers were measured by us.")
             + " Labels whose model is not rebuilt yet are left out: " +
             (", ".join(f"{k}: {v}" for k, v in doc["skipped"].items()) or "none") + ".\n",
             "**Predictions.** *prior*: every kernel priced by the NeuSight kernel prior (fp32 single "
             "operators) on the GPU's spec sheet, tensor-core kernels scaled to their peak. *learned*: every "
             "kernel's roofline on the spec sheet (its bytes from L2 where the L2 holds them, at an assumed 32 "
             "bytes per clock per SM; `perfseer_rt/gpu/learned_features.py`) times the learned layer's "
             "correction, fitted on the other labels, each weighted 1 / n^P by the number n of labels of its "
             "(source, GPU, mode) group (at P = 1 each group counts the same, at 0 each label): "
             + _powers(doc["fit"]) + ". *GPU held out* fits "
             "without any label of that GPU (leave-one-GPU-out); *family held "
             f"out* fits without the architecture family's labels ({FAMILY}). *blend*: learned^"
             f"{1 - BLEND_PRIOR_WEIGHT:g} x prior^{BLEND_PRIOR_WEIGHT:g} (`--model blend`; the weight fixed "
             "beforehand, equal). All keep the same PyTorch-eager "
             "kernel model (fused attention from PyTorch 2.0, autocast dtypes, BatchNorm restored) and host "
             "time; cells give MAPE % (median signed error %).\n",
             "| | labels | MAPE % | median % | within 10 % | within 20 % |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, title in (("prior", "prior"), ("learned_logo", "learned, GPU held out"),
                        ("learned_family", "learned, family held out"), ("blend_logo", "blend, GPU held out"),
                        ("blend_family", "blend, family held out")):
        if name not in o:
            continue
        s = o[name]
        lines.append(f"| {title} | {s['n']} | {s['mape']} | {s['median']} | {s['within_10']} | {s['within_20']} |")
    lines.append(f"\nInterval shipped with the layer: {int(100 * COVERAGE)} % of held-out labels (GPU held out) "
                 f"within x{np.exp(doc['interval']['log_q'][0]):.2f} .. x{np.exp(doc['interval']['log_q'][1]):.2f} "
                 "of the prediction.\n")
    if "by_mode" in doc:
        chosen = ", ".join(f"{mode}: {m}" for mode, m in default_models(doc).items())
        lines += _table("By mode (the GPU entries' default model per mode is the one of prior, learned and "
                        f"blend with the lowest MAPE with the GPU held out: {chosen})", doc["by_mode"])
    lines += _table("By source, mode and precision", doc["by_source_mode_precision"])
    lines += _table("By GPU", doc["by_gpu"])
    lines += _table("By kind of architecture", doc["by_kind"])
    lines += _table("By layout", doc["by_layout"])
    if "by_kind_layout" in doc:
        lines += _table("By kind of architecture, layout and mode", doc["by_kind_layout"])
    return "\n".join(lines) + "\n"


def render(path: Path) -> dict[str, Any]:
    """Add :func:`row_tables` to the ``cv.json`` at ``path`` and write it and
    the ``README.md`` beside it again; the other figures stay as the run
    wrote them (the exported layer's record repeats some of them)."""
    doc = json.loads(path.read_text())
    doc.update(row_tables(doc["rows"]))
    atomic_write_bytes(path, (json.dumps(doc, indent=1) + "\n").encode())
    atomic_write_bytes(path.parent / "README.md", markdown(doc).encode())
    return doc


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / \
        "reports" / "gpu-learned" / "cv.json"
    if not target.is_file():
        print(f"error: {target}: no such cv.json", file=sys.stderr)
        raise SystemExit(2)
    render(target)

