"""Extraction speed: perfseer-rt vs onnx-tool's profiler, same files, same run.

Builds a torch-exported ResNet-50 (weights embedded, ~100 MB) with the model
zoo, and the same structure with its weights stripped (external data absent),
then times, alternating the two tools so drift hits both alike:

* ours:     ``perfseer_rt.extract(path, batch=1)`` (load + shape inference +
            folding + features);
* onnx-tool: ``Model(path)`` + ``graph.shape_infer`` + ``graph.profile()``
            (its whole-model FLOPs/params profile; needs the weights).

Targets (issue 2): with weights, ours / onnx-tool <= 0.75; structure-only,
ours under 20 ms median. Run: ``python benchmarks/bench_extract.py``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CACHE = ROOT / "benchmarks" / ".cache"


def build_models(spec: str) -> tuple[Path, Path]:
    """Export the zoo model with weights and structure-only, once (cached)."""
    from training.zoo import export_onnx, parse_spec

    CACHE.mkdir(parents=True, exist_ok=True)
    name = spec.replace(":", "_").replace(",", "_").replace("=", "")
    full, skel = CACHE / f"{name}.onnx", CACHE / f"{name}.structure.onnx"
    cfg = parse_spec(spec)
    if not full.exists():
        export_onnx(cfg, full)
    if not skel.exists():
        export_onnx(cfg, skel, structure_only=True)
    return full, skel


def time_call(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="resnet:depth=50,width=1.0,res=224")
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()

    import onnx_tool

    from perfseer_rt import extract

    full, skel = build_models(args.spec)
    image = np.zeros((1, 3, 224, 224), dtype=np.float32)

    def ours_full():
        extract(full, batch=1)

    def ours_skel():
        extract(skel, batch=1)

    def onnx_tool_full():
        m = onnx_tool.Model(str(full))
        m.graph.shape_infer({m.graph.input[0]: image})
        m.graph.profile()

    for fn in (ours_full, ours_skel, onnx_tool_full):  # warm caches and imports
        fn()
    times = {"ours_full": [], "ours_skel": [], "onnx_tool_full": []}
    for _ in range(args.repeat):  # interleave so noise hits every tool alike
        times["ours_full"] += time_call(ours_full, 1)
        times["ours_skel"] += time_call(ours_skel, 1)
        times["onnx_tool_full"] += time_call(onnx_tool_full, 1)
    med = {k: statistics.median(v) for k, v in times.items()}

    g = extract(full, batch=1)
    print(f"model: {args.spec}  ({full.stat().st_size / 1e6:.1f} MB with weights, "
          f"{skel.stat().st_size / 1e3:.1f} kB structure-only; {g.num_nodes} nodes, "
          f"{g.globals['flops_total'] / 1e9:.2f} GFLOP)")
    print(f"{'measurement':<42}{'median ms':>10}{'min ms':>10}")
    rows = [("perfseer-rt extract, weights embedded", "ours_full"),
            ("perfseer-rt extract, structure-only", "ours_skel"),
            ("onnx-tool load+shape_infer+profile", "onnx_tool_full")]
    for label, key in rows:
        print(f"{label:<42}{med[key]:>10.1f}{min(times[key]):>10.1f}")
    ratio = med["ours_full"] / med["onnx_tool_full"]
    ok_ratio, ok_skel = ratio <= 0.75, med["ours_skel"] < 20.0
    print(f"ratio ours/onnx-tool (weights): {ratio:.3f}  target <= 0.75  "
          f"{'PASS' if ok_ratio else 'FAIL'}")
    print(f"structure-only median: {med['ours_skel']:.1f} ms  target < 20 ms  "
          f"{'PASS' if ok_skel else 'FAIL'}")
    return 0 if ok_ratio and ok_skel else 1


if __name__ == "__main__":
    sys.exit(main())
