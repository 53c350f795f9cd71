"""Held-out check of ``python -m training.byod calibrate`` on HELP data.

``python -m benchmarks.nb201.calibrate_check --csv FILE --device gold_6240``:
for each draw, 10 architectures of the device's trimmed pool (as measured,
``nb201-eager`` graphs) go into a CSV; ``python -m training.byod calibrate``
corrects the shipped ``cpu-amd-epyc-1t`` predictor with them (in a
subprocess, as a user runs it; entries under ``--home``, never the user's
data dir); the entry then predicts 100 architectures of the trimmed test set
(900..1899) that it never saw. Prints and writes JSON: the leave-one-out
estimate the command reported against the held-out MAPE.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.nb201 import protocol
from benchmarks.nb201.help_data import load_help
from training.byod.graphs import GraphCache, graphs_for, resolve


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.nb201.calibrate_check")
    p.add_argument("--csv", required=True, help="HELP-format latency CSV")
    p.add_argument("--device", required=True, help="a batch-1 device column of the CSV")
    p.add_argument("--k", type=int, default=10, help="measured models per calibration (default 10)")
    p.add_argument("--draws", type=int, default=3)
    p.add_argument("--test-archs", type=int, default=100)
    p.add_argument("--home", default="/tmp/perfseer-calibrate-check", help="PERFSEER_RT_HOME of the entries")
    p.add_argument("--cache", default=None, help="graph cache (default training/byod/.cache)")
    p.add_argument("--out", required=True, help="result JSON")
    a = p.parse_args(argv)
    os.environ["PERFSEER_RT_HOME"] = a.home
    from perfseer_rt.predict import api  # after PERFSEER_RT_HOME is set

    data = load_help(a.csv)
    lat = data.latency[a.device]
    pool, test = protocol.protocol_sets(lat)
    held = np.sort(np.random.default_rng(0).choice(test, a.test_archs, replace=False))
    cache = GraphCache(a.cache)
    graphs = graphs_for([resolve("nb201-eager:" + data.cells[i], Path(".")) for i in held], [1] * len(held),
                        cache, "test graphs")
    base = np.array([x["metrics"]["latency_ms"]["value"] for x in api.predict(graphs, device="cpu-amd-epyc-1t")])
    y = lat[held]
    out = {"device": a.device, "k": a.k, "test_archs": int(len(held)),
           "base_heldout_mape": float(100 * np.mean(np.abs(base / y - 1))), "draws": []}
    work = Path(a.home)
    work.mkdir(parents=True, exist_ok=True)
    for seed in range(a.draws):
        idx = protocol.draw(pool, a.k, a.device, seed)
        csv = work / f"{a.device}-{seed}.csv"
        csv.write_text("cell,latency_ms\n" + "".join(f"{data.cells[i]},{lat[i]}\n" for i in idx))
        name = f"help-{a.device}-{seed}"
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "training.byod", "calibrate", "--csv", str(csv), "--model-column", "cell",
               "--model-format", "nb201-eager:{}", "--metric", "latency_ms", "--device", name, "--force", "--json"]
        if a.cache:
            cmd += ["--cache", a.cache]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            print(r.stderr, file=sys.stderr)
            return r.returncode
        c = json.loads(r.stdout)["corrections"]["latency_ms"]
        secs = time.perf_counter() - t0
        pred = np.array([x["metrics"]["latency_ms"]["value"] for x in api.predict(graphs, device=name)])
        ape = np.abs(pred / y - 1)
        row = {"seed": seed, "kind": c["kind"], "loo_mape": c["cv_mape"], "heldout_mape": float(100 * ape.mean()),
               "heldout_within_10": float(100 * (ape <= 0.1).mean()),
               "heldout_spearman": protocol.spearman(pred, y), "seconds": secs}
        print(json.dumps(row), flush=True)
        out["draws"].append(row)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
