"""How onnxruntime's run-phase memory grows with the batch: one factor per architecture.

A CPU record's peak memory is the larger of two phases (``perfseer_rt.profile``):
the session's creation (``load_peak_mb``) and its runs (``run_peak_mb``), both
over the process's baseline; ``loaded_mb`` is what the created session holds
before its first run. This module measures

    k = (run_peak_mb - loaded_mb) / act_live_peak

(``act_live_peak``: the PerfGraph's live-activation peak, MiB) per record,
and answers three questions:

1. Is k one number per architecture? Over a dataset's records: the spread of
   k across each architecture's batch sizes (coefficient of variation) and
   its range per family.
2. Can it be learned from the graph's global features? A gradient-boosted
   model of log k, cross-validated with whole families held out.
3. On real models measured here (``training.byod.cpu_check``'s rows), how far
   from the measured k are the k a device's prediction implies and the
   learned one, and the run phase ``loaded + k * act_live_peak`` built
   from the learned k with the measured ``loaded_mb``.

Records whose live-activation peak is under :data:`MIN_ACT_MIB` are left out
(their run phase is the arena's fixed cost, not a multiple of anything).

    python -m training.byod.memory_k --dataset data/cpu-amd-epyc-1t/inference ... \\
        --measured reports/cpu-calibrate/measured.jsonl --work /tmp/cpuw \\
        --device cpu-amd-epyc-1t --out reports/cpu-calibrate/memory_k.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor

from perfseer_rt.graph import layout
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict import predict
from training.byod.cpu_check import one_thread_values
from training.byod.cpu_score import graphs_for
from training.seernet.data import load_samples, read_records
from training.seernet.sample import GraphSample

#: Smallest live-activation peak (MiB) whose record enters the analysis.
MIN_ACT_MIB = 2.0
_ACT = layout.GLOBAL_COLUMNS.index("act_live_peak")


def run_phase_k(loaded_mb: float, run_peak_mb: float, act_live_peak_mib: float) -> float | None:
    """k of one record (module doc); None below :data:`MIN_ACT_MIB`."""
    if act_live_peak_mib < MIN_ACT_MIB:
        return None
    return (run_peak_mb - loaded_mb) / act_live_peak_mib


def spread(ks_by_arch: dict[str, list[float]]) -> dict[str, float]:
    """Coefficient of variation of k across each architecture's batch sizes
    (architectures with two or more): median, 90th percentile, count."""
    cvs = [float(np.std(v) / np.mean(v)) for v in ks_by_arch.values() if len(v) >= 2 and np.mean(v) > 0]
    if not cvs:
        return {"architectures": 0}
    return {"architectures": len(cvs), "cv_median": float(np.median(cvs)),
            "cv_p90": float(np.percentile(cvs, 90))}


def _features(u: np.ndarray) -> np.ndarray:
    return np.log1p(np.abs(np.asarray(u, dtype=np.float64)))


def both_phases(dirs: Sequence[str]) -> list[tuple[GraphSample, float, float]]:
    """``(sample, loaded_mb, run_peak_mb)`` of every dataset configuration
    with both measured (``loaded_mb``: the median over its records)."""
    loaded: dict[str, list[float]] = defaultdict(list)
    for r in read_records(dirs):
        q = r.get("quality") or {}
        if r.get("status") == "ok" and q.get("loaded_mb"):
            loaded[r["graph_key"]].append(float(q["loaded_mb"]))
    return [(s, float(np.median(loaded[s.key])), float(s.targets["run_peak_mb"])) for s in load_samples(dirs)
            if s.key in loaded and s.targets.get("run_peak_mb") is not None]


def dataset_rows(dirs: Sequence[str]) -> list[dict[str, Any]]:
    """One row per dataset configuration with a k: arch, family, batch, k,
    and the graph's global features."""
    rows = []
    for s, loaded, run in both_phases(dirs):
        k = run_phase_k(loaded, run, float(s.u[_ACT]) / 2**20)
        if k is not None and k > 0:
            rows.append({"arch": s.arch_id, "family": s.family, "batch": s.batch, "k": k, "u": s.u})
    return rows


def fit_k(rows: Sequence[dict[str, Any]]) -> HistGradientBoostingRegressor:
    """A gradient-boosted model of log k from the graphs' global features."""
    return HistGradientBoostingRegressor(max_iter=300, learning_rate=0.05, max_leaf_nodes=15,
                                         min_samples_leaf=10, random_state=0).fit(
        np.array([_features(r["u"]) for r in rows]), np.log([r["k"] for r in rows]))


def family_held_out(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean relative error of the learned k with each family held out in turn."""
    families = sorted({r["family"] for r in rows})
    out = {}
    for f in families:
        train = [r for r in rows if r["family"] != f]
        test = [r for r in rows if r["family"] == f]
        pred = np.exp(fit_k(train).predict(np.array([_features(r["u"]) for r in test])))
        out[f] = float(np.mean(np.abs(pred / np.array([r["k"] for r in test]) - 1)))
    return out


def check_rows(measured: Path, work: Path, device: str, model: HistGradientBoostingRegressor
               ) -> list[dict[str, Any]]:
    """The measured one-thread rows of ``measured`` with their k: measured,
    implied by ``device``'s run-phase prediction, and learned."""
    acc = one_thread_values(measured, ("loaded_mb", "run_peak_mb"))
    keys = sorted(acc)
    graphs = graphs_for(keys, work)
    results = predict([graphs[k] for k in keys], device=device, metrics=["peak_mem_mb"])
    rows = []
    for key, res in zip(keys, results):
        loaded, run = (float(np.median(acc[key][m])) for m in ("loaded_mb", "run_peak_mb"))
        act = float(graphs[key].u[_ACT]) / 2**20
        k = run_phase_k(loaded, run, act)
        implied = run_phase_k(loaded, res["metrics"]["peak_mem_mb"]["parts"]["inference_run_peak_mb"], act)
        if k is None or implied is None or k <= 0:
            continue
        learned = float(np.exp(model.predict(_features(graphs[key].u)[None])[0]))
        rows.append({"spec": key[0], "batch": key[1], "k": k, "k_implied": implied, "k_learned": learned,
                     "run_peak_mb": run, "run_from_learned_k_mb": loaded + learned * act,
                     "run_predicted_mb": res["metrics"]["peak_mem_mb"]["parts"]["inference_run_peak_mb"]})
    return rows


def _mape(pred: Sequence[float], true: Sequence[float]) -> float:
    return float(np.mean(np.abs(np.asarray(pred) / np.asarray(true) - 1)))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", nargs="+", required=True, help="dataset folders read as one")
    ap.add_argument("--measured", type=Path, help="training.byod.cpu_check rows (optional)")
    ap.add_argument("--work", type=Path, help="with --measured: the exported models and graph cache")
    ap.add_argument("--device", default="cpu-amd-epyc-1t")
    ap.add_argument("--out", type=Path, help="write the summary as JSON")
    args = ap.parse_args(argv)
    rows = dataset_rows(args.dataset)
    by_arch: dict[str, list[float]] = defaultdict(list)
    family_of = {r["arch"]: r["family"] for r in rows}
    for r in rows:
        by_arch[r["arch"]].append(r["k"])
    by_family: dict[str, list[float]] = defaultdict(list)
    for arch, ks in by_arch.items():
        by_family[family_of[arch]].append(float(np.mean(ks)))
    held = family_held_out(rows)
    summary: dict[str, Any] = {
        "dataset": list(args.dataset), "records": len(rows), "across_batch": spread(by_arch),
        "k_by_family": {f: {"architectures": len(v), "median": float(np.median(v)),
                            "p10": float(np.percentile(v, 10)), "p90": float(np.percentile(v, 90))}
                        for f, v in sorted(by_family.items())},
        "learned_k_family_held_out": held,
        "learned_k_family_held_out_mean": float(np.mean([held[r["family"]] for r in rows]))}
    print(f"{len(rows)} records, {summary['across_batch']}")
    for f, v in summary["k_by_family"].items():
        print(f"  {f:14s} k median {v['median']:.2f} (p10 {v['p10']:.2f}, p90 {v['p90']:.2f}); "
              f"learned, family held out: {held[f]:.1%} off")
    print(f"learned k, families held out: {summary['learned_k_family_held_out_mean']:.1%} off (per record)")
    if args.measured is not None:
        if args.work is None:
            ap.error("--measured needs --work")
        checks = check_rows(args.measured, args.work, args.device, fit_k(rows))
        summary["check"] = {"device": args.device, "by_batch": {}}
        for b in sorted({c["batch"] for c in checks}):
            sel = [c for c in checks if c["batch"] == b]
            k = [c["k"] for c in sel]
            stats = {"configurations": len(sel), "k_median": float(np.median(k)),
                     "k_implied_off": _mape([c["k_implied"] for c in sel], k),
                     "k_learned_off": _mape([c["k_learned"] for c in sel], k),
                     "run_from_learned_k_off": _mape([c["run_from_learned_k_mb"] for c in sel],
                                                     [c["run_peak_mb"] for c in sel]),
                     "run_predicted_off": _mape([c["run_predicted_mb"] for c in sel],
                                                [c["run_peak_mb"] for c in sel])}
            summary["check"]["by_batch"][str(b)] = stats
            print(f"check batch {b}: {len(sel)} models, k median {stats['k_median']:.2f}; implied by "
                  f"{args.device} {stats['k_implied_off']:.1%} off, learned {stats['k_learned_off']:.1%} off; "
                  f"run phase from the learned k {stats['run_from_learned_k_off']:.1%} off, as "
                  f"{args.device} predicts it {stats['run_predicted_off']:.1%} off")
        summary["check"]["rows"] = checks
    if args.out is not None:
        atomic_write_bytes(args.out, (json.dumps(summary, indent=1) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
