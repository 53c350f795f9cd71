"""The shipped GPU predictors against one public source's labels, as a user
would ask them: ``perfseer_rt.predict.predict`` on the whole structure-only
model (every layer), the label's GPU, precision, layout, mode and optimizer;
the learned layer, the kernel prior and their blend side by side.

Run it on a source the shipped layer was not trained on (its
``learned.json`` names the sources it saw) and it is a held-out check of the
product as shipped:

    python -m training.gpulearned.shipped_check --cache DIR --source lambda [--out FILE.json]

It prints one row per label (measured, predicted, signed error) and the MAPE
by model, precision and GPU; ``--out`` writes the rows as JSON. The
transformers are exported whole once into ``DIR/full`` (their labels are
built from 1 and 2 layers elsewhere).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from tqdm import tqdm

from perfseer_rt.gpu.layouts import LAYOUTS
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict import predict
from training.gpulearned import labels as LB
from training.gpulearned import report
from training.gpulearned.tables import Label

PREDICTORS = ("learned", "prior", "blend")


def full_model(model: LB.LayeredModel, mode: str, cache: Path) -> str:
    """``model`` exported with all its layers for ``mode`` into ``cache/full`` (once)."""
    from training.gpuprior.neusight_e2e import export_model  # lazy: torch + transformers

    folder = cache / "full"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{model.name}-{(model.head or ('default',))[0]}-{mode}.onnx"
    if not path.is_file():
        export_model(model.name, None, path, folder=model.configs, mode=mode, head=model.head)
    return str(path)


def predicted_ms(lab: Label, onnx: str, predictor: str) -> float:
    """The shipped ``predictor``'s step (or latency) ms for ``lab`` (its
    attention as the label's framework ran it: ``--attention``)."""
    [ans] = predict(onnx, batch=lab.batch, device=lab.gpu, model=predictor, precision=lab.precision,
                    dims=dict(lab.dims) or None, mode=lab.mode, optimizer=lab.optimizer,
                    layout=lab.layout if lab.layout in LAYOUTS else None,
                    attention="fused" if lab.sdpa else "materialised")
    key = "step_ms" if lab.mode == "train" else "latency_ms"
    return float(ans["metrics"][key]["value"])


def rows(source: str, cache: Path, root: Path = LB.DATA) -> list[dict]:
    """One row per label of ``source``: its fields, measured ms, each predictor's ms."""
    plain, layered, _ = LB.load(root, cache)
    jobs = [(lab, lab.onnx) for lab in plain if lab.source == source]
    jobs += [(lab, full_model(m, lab.mode, cache)) for lab, m in layered if lab.source == source]
    out = []
    for lab, onnx in tqdm(jobs, desc=f"{source} labels"):
        row = {"model": Path(onnx).stem, "gpu": lab.gpu, "precision": lab.precision, "batch": lab.batch,
               "mode": lab.mode, "optimizer": lab.optimizer, "measured_ms": lab.ms}
        for p in PREDICTORS:
            row[f"{p}_ms"] = predicted_ms(lab, onnx, p)
        out.append(row)
    return out


def summary(table: list[dict]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """MAPE % and median signed error % of each predictor by model, precision
    and GPU (and overall)."""
    def stats(sel: list[dict], p: str) -> dict[str, float]:
        return report.stats(np.array([r[f"{p}_ms"] for r in sel]), np.array([r["measured_ms"] for r in sel]))
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for by in ("all", "model", "precision", "gpu"):
        groups: dict[str, list[dict]] = defaultdict(list)
        for r in table:
            groups["all" if by == "all" else str(r[by])].append(r)
        for key, sel in sorted(groups.items()):
            out.setdefault(by, {})[key] = {p: stats(sel, p) for p in PREDICTORS}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.gpulearned.shipped_check",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, required=True)
    # the sources whose labels a user can ask for as they ran (NeuSight's training
    # labels have no optimizer update, which predict() always prices)
    ap.add_argument("--source", default="lambda", choices=("lambda", "timm"))
    ap.add_argument("--data", type=Path, default=LB.DATA)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    table = rows(args.source, args.cache, args.data)
    if not table:
        print(f"no {args.source} labels with rebuilt models in {args.cache}", file=sys.stderr)
        return 2
    for r in table:
        print(f"{r['model']:>40} {r['gpu']:>16} {r['precision']:>9} b{r['batch']:<5} "
              f"measured {r['measured_ms']:9.1f}  " + "  ".join(
                  f"{p} {r[f'{p}_ms']:9.1f} ({(r[f'{p}_ms'] / r['measured_ms'] - 1) * 100:+5.0f} %)"
                  for p in PREDICTORS))
    doc = {"source": args.source, "summary": summary(table), "rows": table}
    print(json.dumps(doc["summary"], indent=1))
    if args.out:
        atomic_write_bytes(args.out, (json.dumps(doc, indent=1) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
