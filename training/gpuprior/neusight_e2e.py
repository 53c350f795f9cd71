"""The GPU prior against whole-model GPU latencies measured by others.

NeuSight's artifact (``sitar-lab/NeuSight``, MIT licence) publishes, beside the
per-operator rows the prior is fitted on, the end-to-end latency of five dense
transformers (BERT-large, GPT-2 large, GPT-3 XL, GPT-3 2.7B, OPT-1.3B built
from the Hugging Face configs in ``scripts/asplos/data/DLmodel_configs``) on
twelve GPUs, H100 and L4 among them: PyTorch 2.1 eager, fp32 (cuDNN TF32 off),
random weights, ``input_ids`` of ones, the mean of the fastest 5 of 25 timed
forward passes (CUDA events around ``model(input_ids)``). Those are the
whole-model labels the prior never saw (its rows are single operators on five
GPUs; the H100 and L4 have no rows at all).

Two steps:

``labels --repo GITDIR``: read every single-GPU inference and training label
(``scripts/asplos/label/<GPU>/<model>-<mode>-<seq>-<batch>.json``, fused and
multi-GPU runs left out) and the model configs from a clone of the artifact
(``git show``, no work tree needed) into ``data/neusight-e2e/``, each row
naming its source file and commit.

``check``: export every model structure-only (transformers from the config,
eager attention, dynamic batch and sequence), predict each NVIDIA inference
label with the matching shipped device entry and write
``reports/gpu-prior/neusight_e2e.{md,json}``. A model is exported with 1 and 2
layers and the prediction for ``L`` layers is ``P1 + (L - 1) (P2 - P1)``: the
prior's latency is a sum over kernels, and the layers are identical, so this
is the full model's prediction without building billions of weights (checked
against a full export of BERT-large and GPT-2 large, printed in the report).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import onnx
from tqdm import tqdm

from perfseer_rt.predict import api
from training.gpuprior.neusight_calibration import record
from training.gpuprior.neusight_labels import DATA, collect_labels, read_labels, write_labels
from training.gpuprior.neusight_report import write_report


#: The model class NeuSight's ``get_model`` builds from each config (their
#: ``neusight/Tracing/trace.py``): BERT is timed as a sequence classifier in
#: inference (no LM head) and as BertForPreTraining in training; the GPT-2 and
#: OPT configs as causal LMs in both.
def head_of(model_type: str, mode: str) -> tuple[str, str]:
    """(transformers auto class, name of the output that carries the logits)."""
    if model_type == "bert":
        return (("AutoModelForSequenceClassification", "logits") if mode == "inference"
                else ("AutoModelForPreTraining", "prediction_logits"))
    return "AutoModelForCausalLM", "logits"


def export_model(name: str, layers: int | None, path: Path, folder: Path = DATA,
                 mode: str = "inference") -> Path:
    """``name``'s config with ``layers`` layers (None: as configured), built
    as NeuSight built it for ``mode`` (:func:`head_of`) and exported
    structure-only to ``path`` with dims ``batch`` and ``seq``."""
    # deliberately lazy: torch and transformers are needed by this step only
    import torch

    from training.zoo.export import strip_weights
    from training.zoo.real.torchvision_compat import import_transformers

    transformers = import_transformers()

    cfg = json.loads((folder / "configs" / f"{name}.json").read_text())
    if layers is not None:
        cfg["n_layer" if "n_layer" in cfg else "num_hidden_layers"] = layers
    model_type = cfg.pop("model_type")
    cfg.pop("architectures", None)
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    config.use_cache = False
    auto, output = head_of(model_type, mode)
    model = getattr(transformers, auto).from_config(config, attn_implementation="eager").eval()

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            # an all-ones mask, as HF builds when none is given; without one transformers
            # traces a packed-sequence check (torch.diff) that has no ONNX export
            return self.model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))[output]

    per_token = not (model_type == "bert" and mode == "inference")
    ids = torch.ones((2, 16), dtype=torch.int64)
    with torch.no_grad(), tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        # to a file: torch writes the weights of a model over 2 GiB as external data beside it
        torch.onnx.export(Logits(), (ids,), str(Path(tmp) / "model.onnx"), dynamo=False,
                          opset_version=18, do_constant_folding=True, input_names=["input_ids"],
                          output_names=["logits"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                        "logits": {0: "batch", 1: "seq"} if per_token else {0: "batch"}})
        proto = onnx.load(str(Path(tmp) / "model.onnx"))
    strip_weights(proto, path.name + ".data")
    onnx.save_model(proto, str(path))
    return path


def layers_of(name: str, folder: Path = DATA) -> int:
    cfg = json.loads((folder / "configs" / f"{name}.json").read_text())
    return int(cfg.get("n_layer", cfg.get("num_hidden_layers")))


def predicted(paths: dict[int, Path], layers: int, device: str, batch: int, seq: int,
              mode: str = "inference") -> dict[str, float]:
    """The prior's prediction (before any calibration of the entry) at
    ``layers`` layers from exports with 1 and 2 layers (``paths``), or from
    a full export where ``paths`` has one: inference ``{"total": ms}``; train
    the step's parts (``forward``, ``loss``, ``backward``, ``optimizer``, ms)."""
    def parts(p: Path) -> dict[str, float]:
        (r,) = api.predict(str(p), batch=batch, dims={"seq": seq}, device=device, mode=mode)
        if mode == "inference":  # the prior's own: the parts come before any calibration
            lat = r["metrics"]["latency_ms"]
            return {"total": float(sum(lat["parts"].values())), "launch": float(lat["launch_overhead_ms"]),
                    **{f"family:{k}": float(v) for k, v in lat["parts"].items()}}
        step = r["metrics"]["step_ms"]
        return {**{k: float(v) for k, v in step["parts"].items()},
                **{f"launch:{k}": float(v) for k, v in step["launch_overhead_ms"].items()}}

    if layers in paths:
        return parts(paths[layers])
    p1, p2 = parts(paths[1]), parts(paths[2])
    return {k: p1.get(k, 0.0) + (layers - 1) * (p2.get(k, 0.0) - p1.get(k, 0.0)) for k in {**p1, **p2}}


def _exports(rows: list[dict[str, Any]], tmp: Path, mode: str, full: tuple[str, ...] = ()
             ) -> dict[str, dict[int, Path]]:
    paths: dict[str, dict[int, Path]] = {}
    for m in tqdm(sorted({r["model"] for r in rows}), desc=f"exports ({mode})"):
        paths[m] = {k: export_model(m, k, tmp / f"{m}-{mode}-{k}.onnx", mode=mode) for k in (1, 2)}
        if m in full:
            L = layers_of(m)
            paths[m][L] = export_model(m, None, tmp / f"{m}-{mode}-{L}.onnx", mode=mode)
    return paths


def check(tmp: Path, full: tuple[str, ...] = ("bert_large", "gpt2_large")) -> dict[str, Any]:
    """Inference: every NVIDIA label against the prior's latency; training:
    every NVIDIA label (forward + backward, as NeuSight timed it: no
    optimizer step) against the step's forward + loss + backward."""
    labels = [r for r in read_labels() if r["device"]]
    rows = [r for r in labels if r["mode"] == "inference"]
    paths = _exports(rows, tmp, "inference", full)
    additivity = []
    for m in full:
        L = layers_of(m)
        r = next(r for r in rows if r["model"] == m)
        whole = predicted({L: paths[m][L]}, L, r["device"], r["batch"], r["seq"])["total"]
        extra = predicted({k: paths[m][k] for k in (1, 2)}, L, r["device"], r["batch"], r["seq"])["total"]
        additivity.append({"model": m, "device": r["device"], "batch": r["batch"], "seq": r["seq"],
                           "full_export_ms": whole, "from_1_and_2_layers_ms": extra})
    keep = ("gpu", "device", "model", "seq", "batch", "num_layer", "e2e_ms", "source")
    out = []
    for r in tqdm(rows, desc="predictions (inference)"):
        p = predicted({k: paths[r["model"]][k] for k in (1, 2)}, r["num_layer"], r["device"],
                      r["batch"], r["seq"])
        pred = p["total"]
        out.append({**{k: r[k] for k in keep},
                    "predicted_ms": round(pred, 3), "error": round(pred / r["e2e_ms"] - 1, 4),
                    "launch_ms": round(p["launch"], 3),
                    "families": sorted(k.split(":", 1)[1] for k, v in p.items()
                                       if k.startswith("family:") and v > 0)})
    train = [r for r in labels if r["mode"] == "train"]
    tpaths = _exports(train, tmp, "train")
    tout = []
    for r in tqdm(train, desc="predictions (train)"):
        p = predicted({k: tpaths[r["model"]][k] for k in (1, 2)}, r["num_layer"], r["device"],
                      r["batch"], r["seq"], mode="train")
        fw, bw = p["forward"], p["loss"] + p["backward"]
        tout.append({**{k: r[k] for k in keep}, "fw_ms": r["fw_ms"], "bw_ms": r["bw_ms"],
                     "launch_ms": round(p["launch:forward"] + p["launch:loss"] + p["launch:backward"], 3),
                     "predicted_fw_ms": round(fw, 3), "predicted_bw_ms": round(bw, 3),
                     "predicted_ms": round(fw + bw, 3), "optimizer_ms": round(p["optimizer"], 3),
                     "error": round((fw + bw) / r["e2e_ms"] - 1, 4)})
    return {"rows": out, "train_rows": tout, "additivity": additivity, "commit": labels[0]["commit"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.gpuprior.neusight_e2e", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    lab = sub.add_parser("labels", help="copy the labels and configs from a clone of the artifact")
    lab.add_argument("--repo", type=Path, required=True, help="git directory of sitar-lab/NeuSight")
    sub.add_parser("check", help="predict every NVIDIA inference label; write the report and "
                                 "each device entry's accuracy.whole_model")
    args = ap.parse_args(argv)
    if args.step == "labels":
        rows, configs = collect_labels(args.repo)
        write_labels(rows, configs)
        print(f"{len(rows)} labels -> {DATA / 'labels.csv'}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        write_report(check(Path(tmp)))
    print("whole-model accuracy recorded in:", ", ".join(record()) or "none changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
