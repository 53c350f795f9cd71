"""Whole-model predictions of the GPU prior next to the per-node roofline.

NOT a validation (that is :mod:`training.gpuprior.neusight_e2e`, on
published whole-model latencies of five transformers). The table shows what
the shipped prior answers for zoo models and how far above the plain
per-node roofline sum it lies (the issue's reference point: the per-node
roofline is ~26 % under measured H100 whole-model latency of large
transformers).

``python -m training.gpuprior.whole_model`` -> ``reports/gpu-prior/whole_model.{md,json}``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from tqdm import tqdm

from perfseer_rt import extract
from perfseer_rt.gpu import features as F
from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict import api, registry
from training.zoo import export_onnx, parse_spec

REPO = Path(__file__).resolve().parents[2]
MODELS = ("resnet:depth=50,width=1.0,res=224", "vit", "bert", "gpt")
BATCHES = (1, 8)
DEVICES = ("h100", "h200", "a100-40gb", "l4", "t4")


def roofline_sum_ms(graph, spec: GpuSpec) -> float:
    """Per-node roofline: sum of max(FLOPs/peak, bytes/bw), no overheads."""
    f, b = graph.node_column("flops"), graph.node_column("mac")
    return float(F.roofline_ms(f, b, F.spec_arrays(spec, len(f))).sum())


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [(m, b) for m in MODELS for b in BATCHES]
        for spec_text, batch in tqdm(jobs, desc="whole models"):
            cfg = parse_spec(spec_text)
            path = export_onnx(cfg, Path(tmp) / f"{cfg.family}.onnx", structure_only=True)
            graph = extract(path, batch=batch)
            for dev in DEVICES:
                (r,) = api.predict(str(path), batch=batch, device=dev)
                spec = GpuSpec.from_config(registry.get_predictor(dev).manifest["spec"])
                roof = roofline_sum_ms(graph, spec)
                lat = r["metrics"]["latency_ms"]["value"]
                rows.append({"model": spec_text, "batch": batch, "device": dev,
                             "gflops": round(graph.globals["flops_total"] / 1e9, 2),
                             "prior_ms": lat, "roofline_sum_ms": round(roof, 4),
                             "prior_over_roofline": round(lat / roof, 2),
                             "peak_mem_mib": r["metrics"]["peak_mem_mb"]["value"],
                             "mig": (r["mig"] or {}).get("profile")})
    out = REPO / "reports" / "gpu-prior"
    atomic_write_bytes(out / "whole_model.json", json.dumps(rows, indent=1).encode())
    lines = ["# Whole-model predictions of the GPU prior for zoo models\n",
             "`python -m training.gpuprior.whole_model`. These are the device entries' answers "
             "(the prior, scaled where the entry is calibrated: a100-40gb, t4, p100, v100; fp32, "
             "onnxruntime CUDA EP assumed, structure-only zoo exports; the whole-model check on "
             "published labels is neusight_e2e.md) beside the plain "
             "per-node roofline sum over the same PerfGraph. "
             "For scale: the per-node roofline was ~26 % under measured whole-model H100 "
             "latency of large transformers (issue 19), i.e. measured / roofline ~1.35.\n",
             "| model | batch | device | GFLOPs | prior ms | per-node roofline ms | prior / roofline | peak MiB | MIG |",  # noqa: E501 (a command line / table row / spec kept whole)
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['batch']} | {r['device']} | {r['gflops']:g} | "
                     f"{r['prior_ms']:.3f} | {r['roofline_sum_ms']:.3f} | {r['prior_over_roofline']:.2f} | "
                     f"{r['peak_mem_mib']:.0f} | {r['mig'] or '-'} |")
    ratios = np.array([r["prior_over_roofline"] for r in rows])
    lines.append(f"\nprior / per-node roofline over these {len(rows)} rows: median "
                 f"{np.median(ratios):.2f}, range {ratios.min():.2f}-{ratios.max():.2f}.\n")
    lines.append("Known oddity: the L4 (ridge point ~104 FLOP/B, far outside the five measured "
                 "GPUs' 12-30) gets small-batch convolutions slower than the T4 (ResNet-50 at "
                 "batch 1); at batch 8 and on every transformer it is faster, as its spec "
                 "sheet says. Small kernels are dominated by the per-call cost the prior "
                 "subtracts, and the L4's features lie outside the training range.\n")
    atomic_write_bytes(out / "whole_model.md", "\n".join(lines).encode())
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
