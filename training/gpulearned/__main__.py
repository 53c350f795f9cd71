"""``python -m training.gpulearned``: build the learned layer's training set
from the public whole-model records, cross-validate it leave-one-GPU-out
and with architecture families held out (against the kernel prior), and
export it.

    python -m training.gpulearned cv --cache DIR [--data DIR] [--epochs N] [--group-power P]
                                     [--train-group-power Q] [--drop NAME[+NAME]]
    python -m training.gpulearned export --cache DIR [--data DIR] [--epochs N] [--group-power P]
                                         [--train-group-power Q] [--drop NAME[+NAME]]

``cv`` writes ``reports/gpu-learned/{README.md,cv.json}`` (each fold's
predictions are kept under ``DIR/gpulearned/folds``: a cut-off run resumes);
``export`` fits on every label and writes ``exported_models/_gpu_learned``
with the held-out accuracy of the last ``cv`` (its intervals come from the
leave-one-GPU-out errors). With ``--train-group-power`` other than
``--group-power``, a layer per mode is fitted (both on every label) and each
mode's answers come from its own. ``--drop`` leaves the named kernel
features out of both modes' layers (the exported ``learned.json`` names the
columns its layers read).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from datetime import date
from pathlib import Path

import numpy as np

from perfseer_rt.gpu import learned_features as LF
from perfseer_rt.gpu.prior import load_prior
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.gpulearned import dataset, report
from training.gpulearned import fit as FT
from training.gpulearned import tables as T
from training.gpulearned.export import export

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "reports" / "gpu-learned"
EXPORT = REPO / "exported_models" / "_gpu_learned"
#: Folds of the family-held-out validation (families hashed into them).
FAMILY_FOLDS = 5
#: How the layer's record names each public source it was trained on.
SOURCES = (("timm", "timm's RTX 3090/4090 benchmark CSVs (AMP fp16)"),
           ("neusight", "NeuSight's transformer runs (fp32, 8 NVIDIA GPUs)"),
           ("lambda", "Lambda's DeepLearningExamples training logs (16 GPUs)"))


def family_fold(group: str) -> str:
    return f"fold{int(hashlib.sha256(group.encode()).hexdigest(), 16) % FAMILY_FOLDS}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.gpulearned", description=__doc__.split("\n")[0])
    ap.add_argument("step", choices=("cv", "export"))
    ap.add_argument("--data", type=Path, default=dataset.LB.DATA, help="records (default data/public-gpu)")
    ap.add_argument("--ours", type=Path, default=dataset.LB.OURS,
                    help="our own GPU records, measured by us (default data/gpu; absent: none)")
    ap.add_argument("--cache", type=Path, required=True, help="rebuilt ONNX models and the kernel-data cache")
    ap.add_argument("--epochs", type=int, default=FT.FitConfig.epochs)
    ap.add_argument("--group-power", type=float, default=FT.FitConfig.group_power,
                    help="labels weighted 1 / n ** P by their (source, GPU, mode) group's size n "
                         f"(default {FT.FitConfig.group_power}); the inference layer's")
    ap.add_argument("--train-group-power", type=float, default=None,
                    help="the training-step layer's P (default: --group-power, one layer for both modes)")
    ap.add_argument("--drop", default="",
                    help="kernel features the layers do not see, joined by '+' "
                         "(names of perfseer_rt.gpu.learned_features.names())")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--export", type=Path, default=EXPORT)
    args = ap.parse_args(argv)
    train_power = args.group_power if args.train_group_power is None else args.train_group_power
    drop = tuple(d for d in args.drop.split("+") if d)
    cfgs = {"inference": FT.FitConfig(epochs=args.epochs, group_power=args.group_power, drop=drop),
            "train": FT.FitConfig(epochs=args.epochs, group_power=train_power, drop=drop)}
    try:
        FT.columns(cfgs["inference"], len(LF.names()))
    except ValueError as exc:
        print(f"error: --drop: {exc}", file=sys.stderr)
        return 2
    powers = f"--group-power {args.group_power:g}" + (
        f" --train-group-power {train_power:g}" if train_power != args.group_power else "") + (
        f" --drop {'+'.join(drop)}" if drop else "")
    prior = load_prior(str(REPO / "exported_models" / "_gpu_prior"))
    labels, data, skipped = dataset.build(args.data, args.cache, prior, ours=args.ours)
    if not labels:
        print("no labels with rebuilt models: run `python -m training.publicgpu export` first", file=sys.stderr)
        return 2
    y = np.array([lab.ms for lab in labels])
    groups = [f"{lab.source}/{lab.gpu}/{lab.mode}" for lab in labels]
    if args.step == "cv":
        ids = [T.label_id(lab) for lab in labels]
        store = args.cache / "gpulearned" / "folds"
        splits = {"logo": [lab.gpu for lab in labels], "family": [family_fold(lab.group) for lab in labels]}
        held: dict[str, np.ndarray] = {}
        for name, folds in splits.items():
            per_power = {p: FT.cross_validate(data, y, groups, folds, c, store=store, ids=ids)
                         for p, c in _distinct(cfgs).items()}
            held[name] = np.array([per_power[cfgs[lab.mode].group_power][i] for i, lab in enumerate(labels)])
        prior_ms = np.array([d.prior_ms for d in data])
        doc = report.write(args.out, labels, y, prior_ms, held["logo"], held["family"], skipped, cfgs,
                           command=f"python -m training.gpulearned cv --cache DIR --epochs {args.epochs} {powers}")
        print(json.dumps(doc["overall"], indent=1))
        return 0
    models = {p: FT.fit(data, y, groups, c, progress=True) for p, c in _distinct(cfgs).items()}
    cv = json.loads((args.out / "cv.json").read_text()) if (args.out / "cv.json").is_file() else None
    ours = sum(lab.source == "ours" for lab in labels)
    sources = {lab.source for lab in labels}
    named = [text for key, text in SOURCES if key in sources]
    summary = {"provenance": "whole-model latencies measured by others: " + ", ".join(named)
                             + (f"; and {ours} of our own GPU records (data/gpu, measured by us)" if ours
                                else "; not measured by us"),
               "trained": {"labels": len(labels), "ours": ours, "sources": named,
                           "date": date.today().isoformat(), "epochs": args.epochs,
                           "group_power": {mode: c.group_power for mode, c in cfgs.items()},
                           "dropped_features": list(drop),
                           "gpus": sorted({lab.gpu for lab in labels}),
                           "families": len({lab.group for lab in labels})},
               "accuracy": report.accuracy_block(cv) if cv else None}
    export({mode: models[c.group_power] for mode, c in cfgs.items()}, args.export, summary)
    atomic_write_bytes(args.out / "trained_on.json",
                       (json.dumps(summary["trained"], indent=1) + "\n").encode())
    print(f"wrote {args.export}")
    return 0


def _distinct(cfgs: dict[str, FT.FitConfig]) -> dict[float, FT.FitConfig]:
    """The modes' settings, one per group power (the only setting that
    differs between modes): equal settings are fitted once."""
    out: dict[float, FT.FitConfig] = {}
    for c in cfgs.values():
        out.setdefault(c.group_power, c)
    return out


if __name__ == "__main__":
    sys.exit(main())
