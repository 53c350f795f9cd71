"""Prediction speed, each figure beside a peer measured in the same run.

1. In-process extract + predict of a structure-only ResNet-50 (median ms),
   beside onnx-tool's profile of the same model with weights (the cheapest
   thing a user would otherwise run). Target: under 30 ms.
2. Batched prediction of NAS-Bench-201 graphs (already extracted) through
   ``run_predictor`` (``CHUNK_NODES`` nodes per onnxruntime call) on one
   core, graphs/s, beside extraction alone of the same graphs; the same
   graphs in a single call are printed too. Target: at least 1,000 graphs/s.
3. ``perfseer-rt predict`` cold start as a whole process (median s), beside
   ``python -c "import onnxruntime"`` (the floor any onnxruntime tool pays).
   Target: under 1.5 s.

Run: ``python benchmarks/bench_predict.py [--device NAME]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_extract import build_models  # noqa: E402


def median_ms(fn, repeat: int) -> float:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def nb201_graphs(n: int):
    """Extract ``n`` NAS-Bench-201 networks (cells from the external CSV)."""
    import csv

    from perfseer_rt import extract
    from training.zoo import export_onnx, parse_spec

    csv_path = ROOT.parent / "shared" / "external" / "help-nb201" / "nb201_latency.csv"
    cache = ROOT / "benchmarks" / ".cache" / "nb201"
    cache.mkdir(parents=True, exist_ok=True)
    cells = []
    with open(csv_path) as fh:
        for row in csv.DictReader(fh):
            cells.append(row["arch_str"])
            if len(cells) >= n:
                break
    graphs, paths = [], []
    for i, cell in enumerate(cells):
        p = cache / f"{i}.onnx"
        if not p.exists():
            export_onnx(parse_spec(f"nb201:{cell}"), p, structure_only=True)
        paths.append(p)
        graphs.append(extract(p, batch=1))
    return graphs, paths


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--nb201", type=int, default=200, help="graphs in the batched test")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    import onnx_tool

    from perfseer_rt import extract
    from perfseer_rt.predict import api, seernet_run
    from perfseer_rt.predict.registry import get_predictor

    pred = get_predictor(args.device)
    full, skel = build_models("resnet:depth=50,width=1.0,res=224")

    def ours():
        api.predict(skel, batch=1, device=pred.device)

    def onnx_tool_profile():
        m = onnx_tool.Model(str(full))
        m.graph.shape_infer({m.graph.input[0]: np.zeros((1, 3, 224, 224), np.float32)})
        m.graph.profile()

    ours(), onnx_tool_profile()
    t_ours = median_ms(ours, args.repeat)
    t_peer = median_ms(onnx_tool_profile, args.repeat)

    graphs, paths = nb201_graphs(args.nb201)
    rates = {}
    for name in pred.model_names:  # every shipped model; the target applies to the default
        seernet_run.run_predictor(pred, graphs, name)
        rates[name] = len(graphs) / (median_ms(lambda n=name: seernet_run.run_predictor(pred, graphs, n), 5) / 1e3)
    default = pred.default_model
    single = len(graphs) / (median_ms(lambda: seernet_run.run_predictor(pred, graphs, default,
                                                                chunk_nodes=1 << 62), 5) / 1e3)
    t_batch = len(graphs) / rates[default] * 1e3
    t_extract = median_ms(lambda: [extract(p, batch=1) for p in paths[:50]], 3) * len(paths) / 50
    rate = len(graphs) / (t_batch / 1e3)

    cmd = [sys.executable, "-m", "perfseer_rt.cli", "predict", str(skel), "--device",
           pred.device, "--json"]
    floor = [sys.executable, "-c", "import onnxruntime"]
    cold, base = [], []
    for _ in range(5):
        for c, out in ((cmd, cold), (floor, base)):
            t0 = time.perf_counter()
            subprocess.run(c, check=True, capture_output=True)
            out.append(time.perf_counter() - t0)
    t_cold, t_floor = statistics.median(cold), statistics.median(base)

    print(f"device: {pred.device}; default model file {pred.model_file().name}; batched NB201 graphs/s "
          "per model: " + ", ".join(f"{n} {r:.0f}" for n, r in rates.items())
          + f"; default model, all graphs in one call: {single:.0f}")
    print(f"{'measurement':<58}{'value':>12}{'peer':>12}{'ratio':>8}  target")
    rows = [
        ("extract+predict ResNet-50 structure-only, ms | onnx-tool", t_ours, t_peer, "< 30 ms",
         t_ours < 30),
        (f"batched NB201 ({len(graphs)} graphs) graphs/s | extract-only", rate,
         len(graphs) / (t_extract / 1e3), ">= 1000/s", rate >= 1000),
        ("`perfseer-rt predict` cold start, s | import onnxruntime", t_cold, t_floor, "< 1.5 s",
         t_cold < 1.5),
    ]
    ok = True
    for label, v, peer, target, passed in rows:
        ok &= passed
        print(f"{label:<58}{v:>12.2f}{peer:>12.2f}{v / peer:>8.2f}  {target} "
              f"{'PASS' if passed else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
