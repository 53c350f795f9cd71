"""``python -m training.gpuprior``: leave-one-GPU-out report + exported prior.

Steps (each resumable / cheap to redo):

1. leave-one-GPU-out over every family and GPU (folds cached in
   ``<out>/folds.json``; a rerun with the same ``--steps`` reuses them);
2. the final per-family models fitted on all five GPUs, exported to
   ``<export>/<family>.onnx`` plus ``<export>/prior.json`` (feature names,
   kernel-additive coefficients, accuracy summary, provenance);
3. ``<out>/results.json`` and ``<out>/README.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from perfseer_rt.gpu import features as F
from perfseer_rt.gpu.prior import PRIOR_FORMAT, PROVENANCE
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.gpuprior import models as M
from training.gpuprior.data import FILES, data_root, load_family, load_specs
from training.gpuprior.evaluate import leave_one_gpu_out
from training.gpuprior.report import write_report

REPO = Path(__file__).resolve().parents[2]
COMMAND = "python -m training.gpuprior --steps {steps}  # data: ../shared/external/neusight-kernels"


def export_final(families, steps: int, export: Path, summary: dict) -> dict:
    export.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"format": PRIOR_FORMAT, "provenance": PROVENANCE, "steps": steps,
           "target": "log(latency_ms / roofline_ms), roofline = max(FLOPs/fp32 peak, bytes/bandwidth)",
           "blend_w_mlp": M.BLEND_W_MLP, "families": {}}
    for name, fam in tqdm(families.items(), desc="final fits"):
        spec = fam.spec()
        x = F.features(name, fam.shape, spec)
        roof = M.roofline(fam.shape["flops"], fam.shape["bytes"], spec)
        model = M.fit_mlp(x, np.log(fam.latency_ms / roof), steps=steps)
        atomic_write_bytes(export / f"{name}.onnx", M.export_onnx(model, x.shape[1]))
        doc["families"][name] = {
            "file": f"{name}.onnx", "features": F.feature_names(name),
            "kernel_additive": M.fit_additive(fam.shape["flops"], fam.shape["bytes"], spec,
                                              fam.latency_ms),
            "rows": len(fam), "gpus": sorted(set(fam.devices)),
            "train_range": {"log10_bytes": [float(np.log10(fam.shape["bytes"].min())),
                                            float(np.log10(fam.shape["bytes"].max()))]},
            "leave_one_gpu_out": summary.get(name, {})}
    atomic_write_bytes(export / "prior.json", json.dumps(doc, indent=1).encode())
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.gpuprior", description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=None, help="neusight-kernels folder (default: ../shared/external/...)")
    ap.add_argument("--out", default=str(REPO / "reports" / "gpu-prior"))
    ap.add_argument("--export", default=str(REPO / "exported_models" / "_gpu_prior"))
    ap.add_argument("--steps", type=int, default=300, help="Adam steps per MLP fit")
    ap.add_argument("--families", default=",".join(FILES), help="comma-separated subset")
    args = ap.parse_args(argv)
    root = data_root(args.data)
    specs = load_specs(root)
    families = {f: load_family(f, root, specs) for f in args.families.split(",")}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    folds = leave_one_gpu_out(families, args.steps, cache=out / "folds.json")
    results = write_report(folds, out, COMMAND.format(steps=args.steps), specs)
    export_final(families, args.steps, Path(args.export), results["per_family"])
    print(f"wrote {out}/README.md and {args.export}/ (GPU devices come from their spec sheets: "
          "perfseer_rt/gpu/spec_sheets)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
