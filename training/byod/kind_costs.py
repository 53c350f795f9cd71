"""Fit a base CPU device's cost per kind of work (:mod:`perfseer_rt.calibrate.kinds`).

``time_ms ~ sum_k theta_k * work_k`` over the device's training
measurements (non-negative least squares on relative errors: every
configuration counts the same whatever its size), written into
``perfseer_rt/calibrate/kind_costs.json`` under the device's name with the
fit's MAPE and the command. Calibration uses theta only to split a graph's
time into shares per kind; the shipped predictor still predicts the total.

    python -m training.byod.kind_costs --device cpu-amd-epyc-1t \\
        --dataset data/cpu-amd-epyc-1t/inference data/cpu-amd-epyc-1t/inference-b16-64 ...
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from scipy.optimize import nnls

from perfseer_rt.calibrate.kinds import COSTS_FILE, KINDS, UNITS, work
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict.domain import ops_of_onehot
from training.seernet.data import dataset_dirs, read_graph_shard, read_records

OUT = Path(__file__).resolve().parents[2] / "perfseer_rt" / "calibrate" / COSTS_FILE


def load(folders: Sequence[Path], metric: str = "latency_ms") -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Work ``[n, K]``, measured ``[n]`` and family of every measured configuration."""
    graphs: dict[str, tuple[np.ndarray, ...]] = {}
    for d in dataset_dirs(folders):
        for shard in sorted((d / "graphs").glob("*.npz")):
            graphs.update(read_graph_shard(shard))
    works, ys, fams = [], [], []
    for r in read_records(folders):
        y = (r.get("metrics") or {}).get(metric)
        if r.get("graph_key") in graphs and y and y > 0:
            x = graphs[r["graph_key"]][0]
            works.append(work(ops_of_onehot(x), x))
            ys.append(float(y))
            fams.append(str(r.get("family")))
    return np.array(works), np.array(ys), fams


def fit_theta(works: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative theta minimising the squared relative error."""
    a = works / y[:, None]
    scale = a.max(axis=0)
    scale[scale == 0] = 1.0
    theta, _ = nnls(a / scale, np.ones(len(y)))
    out: np.ndarray = theta / scale
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m training.byod.kind_costs", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", required=True)
    ap.add_argument("--dataset", nargs="+", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    w, y, fams = load(args.dataset)
    theta = fit_theta(w, y)
    pred = w @ theta
    err = np.abs(pred / y - 1)
    share = (w * theta) / pred[:, None]
    doc: dict[str, Any] = (json.loads(args.out.read_text()) if args.out.exists()
                           else {"format": "perfseer-rt-kind-costs", "devices": {}})
    doc["devices"][args.device] = {
        "theta_ms": dict(zip(KINDS, map(float, theta))), "units": UNITS,
        "fit": {"configurations": int(len(y)), "mape": float(100 * err.mean()),
                "within_25": float(100 * (err <= 0.25).mean()),
                "mean_share": dict(zip(KINDS, map(float, share.mean(axis=0))))},
        "command": "python -m training.byod.kind_costs " + " ".join(sys.argv[1:] if argv is None else argv),
        "created": datetime.date.today().isoformat(),
    }
    atomic_write_bytes(args.out, (json.dumps(doc, indent=1) + "\n").encode())
    print(json.dumps(doc["devices"][args.device], indent=1))
    for fam in sorted(set(fams)):
        sel = np.array([f == fam for f in fams])
        print(f"{fam:14s} n={sel.sum():4d} MAPE {100 * err[sel].mean():5.1f} %  shares "
              + " ".join(f"{k}={v:.2f}" for k, v in zip(KINDS, share[sel].mean(axis=0))))


if __name__ == "__main__":
    main()
