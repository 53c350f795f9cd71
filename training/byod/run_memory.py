"""Fit a CPU device's run phase on its measurements: ``run_memory.json``.

The model (:mod:`perfseer_rt.predict.run_memory`) is the created session's
memory, linear in the graph's weight columns, plus one scale times the
arena :mod:`perfseer_rt.predict.ort_arena` simulates. On the dataset's
records (``quality.loaded_mb`` and ``metrics``' ``run_peak_mb``):

- the session part by non-negative least squares on relative error over
  ``[1, weight columns in MiB]`` against the measured ``loaded_mb``;
- the arena scale as the geometric median of
  ``(run_peak_mb - loaded_mb) / resident`` over records whose simulated
  resident bytes reach :data:`MIN_RESIDENT_MIB` (below, the run phase is the
  arena's fixed cost, not a multiple of anything);
- held out: both refitted without each family in turn and scored on it
  (run phase MAPE by batch size).

With ``--measured`` (``training.byod.cpu_check`` rows of real models no
dataset holds) and ``--work`` (their graph cache), the written file is
scored there too: run phase and peak by batch, against the network's run
phase (``reported(..., simulate_run=False)``).

    python -m training.byod.run_memory --dataset data/cpu-amd-epyc-1t/inference ... \\
        --device cpu-amd-epyc-1t [--measured reports/cpu-calibrate/measured.jsonl --work W] \\
        [--report reports/cpu-calibrate/run_memory.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from scipy.optimize import nnls
from tqdm import tqdm

from perfseer_rt.graph import layout
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict import run_memory as rm
from perfseer_rt.predict.ort_arena import footprint
from perfseer_rt.predict.registry import get_predictor
from perfseer_rt.predict.seernet_run import external_weights_mb, reported, run_predictor
from training.byod.cpu_check import one_thread_values
from training.byod.cpu_score import graphs_for
from training.byod.memory_k import both_phases

#: Smallest simulated resident arena (MiB) whose record fits the arena scale.
MIN_RESIDENT_MIB = 2.0
SIMULATOR = "perfseer_rt.predict.ort_arena 1 (plan, BFC first run, memory pattern)"


def session_columns(u: np.ndarray) -> np.ndarray:
    """``[1, weight columns in MiB]`` of one graph's globals."""
    cols = layout.GLOBAL_COLUMNS
    return np.array([1.0] + [float(u[cols.index(c)]) / 2**20 for c in rm.WEIGHT_COLUMNS])


def dataset_rows(dirs: Sequence[str]) -> list[dict[str, Any]]:
    """One row per configuration with both phases measured: family, batch,
    loaded and run MiB, the session columns and the simulated resident MiB."""
    return [{"family": s.family, "batch": s.batch, "loaded": loaded, "run": run, "cols": session_columns(s.u),
             "resident": footprint(s.x, s.edge_index, s.edge_attr).resident / 2**20}
            for s, loaded, run in tqdm(both_phases(dirs), desc="arena", unit="graph")]


def fit(rows: Sequence[dict[str, Any]]) -> tuple[np.ndarray, float]:
    """``(session coefficients, arena scale)`` (module doc)."""
    a = np.array([r["cols"] for r in rows])
    y = np.array([r["loaded"] for r in rows])
    coef, _ = nnls(a / y[:, None], np.ones(len(y)))
    ratios = [(r["run"] - r["loaded"]) / r["resident"] for r in rows
              if r["resident"] >= MIN_RESIDENT_MIB and r["run"] > r["loaded"]]
    if not ratios:
        raise SystemExit(f"no record with a simulated arena of {MIN_RESIDENT_MIB} MiB or more")
    return coef, float(np.exp(np.median(np.log(ratios))))


def predict_rows(rows: Sequence[dict[str, Any]], coef: np.ndarray, scale: float) -> np.ndarray:
    return np.array([float(r["cols"] @ coef) + scale * r["resident"] for r in rows])


def held_out(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Run-phase MAPE (%) with each family held out, by batch size and by family."""
    err = np.zeros(len(rows))
    fam = np.array([r["family"] for r in rows])
    for f in sorted(set(fam)):
        coef, scale = fit([r for r, g in zip(rows, fam) if g != f])
        idx = [int(i) for i in np.flatnonzero(fam == f)]
        pred = predict_rows([rows[i] for i in idx], coef, scale)
        err[idx] = np.abs(pred / np.array([rows[i]["run"] for i in idx]) - 1)
    batch = np.array([r["batch"] for r in rows])
    return {"configurations": len(rows), "run_phase_mape": float(100 * err.mean()),
            "by_batch": {str(b): float(100 * err[batch == b].mean()) for b in sorted(set(batch))},
            "by_family": {f: float(100 * err[fam == f].mean()) for f in sorted(set(fam))}}


def check(measured: Path, work: Path, device: str) -> dict[str, Any]:
    """The device as written against one-thread ``cpu_check`` rows: MAPE (%)
    of the run phase and the peak by batch, simulated and the network's."""
    acc = one_thread_values(measured, ("run_peak_mb", "peak_mem_mb"))
    keys = sorted(acc)
    graphs = graphs_for(keys, work)
    pred = get_predictor(device)
    gs = [graphs[k] for k in keys]
    raw, ext = run_predictor(pred, gs), external_weights_mb(gs)
    col = {n: j for j, n in enumerate(pred.outputs)}
    mem = pred.memory
    if mem is None:
        raise SystemExit(f"{device} has no memory phases")
    out: dict[str, Any] = {"device": device, "by_batch": {}}
    for name, simulate in (("simulated", True), ("network", False)):
        vals = reported(pred, raw, ext, gs, simulate_run=simulate)
        for b in sorted({k[1] for k in keys}):
            idx = [i for i, k in enumerate(keys) if k[1] == b]
            row = out["by_batch"].setdefault(str(b), {"configurations": len(idx)})
            for metric, column in (("run_peak_mb", mem.run), ("peak_mem_mb", mem.peak)):
                meas = np.array([np.median(acc[keys[i]][metric]) for i in idx])
                row[f"{metric}_{name}_mape"] = float(100 * np.mean(np.abs(vals[idx, col[column]] / meas - 1)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", nargs="+", required=True, help="dataset folders read as one")
    ap.add_argument("--device", required=True, help="the shipped device whose folder gets the file")
    ap.add_argument("--measured", type=Path, help="training.byod.cpu_check rows (optional)")
    ap.add_argument("--work", type=Path, help="with --measured: the exported models and graph cache")
    ap.add_argument("--report", type=Path, help="write the fit, held-out and check figures as JSON")
    args = ap.parse_args(argv)
    if args.measured is not None and args.work is None:
        ap.error("--measured needs --work")
    rows = dataset_rows(args.dataset)
    coef, scale = fit(rows)
    held = held_out(rows)
    model = rm.RunMemory(
        intercept_mb=float(coef[0]), weight_coefficients=dict(zip(rm.WEIGHT_COLUMNS, map(float, coef[1:]))),
        arena_scale=scale, simulator=SIMULATOR,
        fitted_on={"datasets": list(args.dataset), "configurations": len(rows),
                   "command": "python -m training.byod.run_memory " + " ".join(argv or sys.argv[1:])},
        held_out=held)
    folder = get_predictor(args.device).folder
    atomic_write_bytes(folder / rm.RUN_MEMORY_FILE, (json.dumps(model.to_dict(), indent=1) + "\n").encode())
    rm.of_folder.cache_clear()
    print(f"wrote {folder / rm.RUN_MEMORY_FILE}: session {coef[0]:.2f} MiB + weights x "
          f"{', '.join(f'{c:.2f}' for c in coef[1:])}; arena scale {scale:.3f}")
    print(f"families held out: run phase {held['run_phase_mape']:.1f} % MAPE; by batch "
          + ", ".join(f"{b}: {v:.1f} %" for b, v in held["by_batch"].items()))
    report: dict[str, Any] = {"model": model.to_dict()}
    if args.measured is not None:
        report["check"] = check(args.measured, args.work, args.device)
        for b, row in report["check"]["by_batch"].items():
            print(f"check batch {b} ({row['configurations']} models): run phase "
                  f"{row['run_peak_mb_simulated_mape']:.1f} % (network {row['run_peak_mb_network_mape']:.1f} %), "
                  f"peak {row['peak_mem_mb_simulated_mape']:.1f} % (network {row['peak_mem_mb_network_mape']:.1f} %)")
    if args.report is not None:
        atomic_write_bytes(args.report, (json.dumps(report, indent=1) + "\n").encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
