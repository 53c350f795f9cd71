"""How far two versions of the shipped predictors' predictions are apart
(the figures of docs/install.md, "Size", for the float16 / int8 weights of
:mod:`training.seernet.compact_weights`).

    git archive bc3cba9 exported_models | tar -x -C /tmp/before
    python -m training.seernet.compact_check /tmp/before/exported_models

Predicts the same graphs with every seernet predictor of this checkout and of
the other folder (same layout as ``exported_models/``) and prints, per
predictor, model and output, the largest and the median relative change
(dimensionless). Graphs: the pinned golden graphs
(``tests/data/golden_graphs.npz``, ``examples/resnet18.onnx`` at batch 1 and
8), ``tests/models/*.onnx`` at batch 1 and 8 (those that extract), and the
calibration reference models at their batch sizes. The NAS-Bench-201
predictors answer NAS-Bench-201 networks only (other graphs get a
``DomainError`` from ``predict``); their changes on the other graphs mean nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np

from perfseer_rt.calibrate.reference import references
from perfseer_rt.errors import PerfSeerError
from perfseer_rt.graph import extract
from perfseer_rt.predict import train_mode
from perfseer_rt.predict.registry import Predictor, models_root, predictors
from perfseer_rt.predict.seernet_run import run_outputs
from training.seernet.data import read_graph_shard

ROOT = Path(__file__).resolve().parents[2]
_DIMS = {"seq": 16, "past_seq": 4, "total_seq": 20, "sequence_length": 16, "batch_size": 1}


class _Arrays:
    """A stored graph as the predictor reads it."""

    def __init__(self, arrays: tuple) -> None:
        self.x, self.edge_index, self.edge_attr, self.u = arrays

    @property
    def num_nodes(self) -> int:
        return len(self.x)


def graphs() -> dict[str, Any]:
    """The graphs compared, by name (see the module doc)."""
    out: dict[str, Any] = {f"examples/resnet18.onnx@b{b}": extract(ROOT / "examples" / "resnet18.onnx", batch=b)
                           for b in (1, 8)}
    out.update({k: _Arrays(v) for k, v in read_graph_shard(ROOT / "tests" / "data" / "golden_graphs.npz").items()})
    for path in sorted((ROOT / "tests" / "models").glob("*.onnx")):
        for b in (1, 8):
            try:
                out[f"{path.name}@b{b}"] = extract(path, batch=b, dims=_DIMS)
            except PerfSeerError:
                continue  # a model that needs other dims: left out
    for ref in references():
        out[f"reference/{ref.name}@b{ref.batch}"] = extract(ref.path, batch=ref.batch)
    return out


def shipped() -> dict[str, Predictor]:
    """Every seernet predictor of this checkout, the training-step ones included."""
    out = {k: v for k, v in predictors().items() if v.kind == "seernet" and not v.user}
    for device in list(out):
        try:
            out[f"{device}/train"] = train_mode.predictor_for(device, "train")
        except PerfSeerError:
            continue  # no training-step predictor for this device
    return out


def compare(other_root: Path) -> dict[str, dict[str, float]]:
    """``predictor/model/output`` -> ``{"max", "median"}`` relative change of
    this checkout's predictions against those of ``other_root``."""
    gs = graphs()
    names = list(gs)
    res = {}
    for key, pred in shipped().items():
        other = dataclasses.replace(pred, folder=other_root / pred.folder.relative_to(models_root()))
        for model in pred.model_names:
            a = run_outputs(other, [gs[n] for n in names], model)[0]
            b = run_outputs(pred, [gs[n] for n in names], model)[0]
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = np.abs(b - a) / np.abs(a)
            for j, output in enumerate(pred.outputs):
                res[f"{key}/{model}/{output}"] = {"max": float(np.nanmax(rel[:, j])),
                                                  "median": float(np.nanmedian(rel[:, j]))}
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.seernet.compact_check",
                                 description=(__doc__ or "").splitlines()[0])
    ap.add_argument("other", type=Path, help="another exported_models/ folder (the version before)")
    args = ap.parse_args(argv)
    for name, r in compare(args.other).items():
        print(f"{name:48s} max {r['max']:.1e}  median {r['median']:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
