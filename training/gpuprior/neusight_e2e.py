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
import csv
import io
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from tqdm import tqdm

from perfseer_rt.gpu.calibrate import Correction, fit_correction
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict import api

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data" / "neusight-e2e"
OUT = REPO / "reports" / "gpu-prior"
SOURCE = "sitar-lab/NeuSight"
LABEL_DIR = "scripts/asplos/label"
CONFIG_DIR = "scripts/asplos/data/DLmodel_configs"
#: dense models with labels (the Switch MoE runs are left out: no MoE export here)
MODELS = ("bert_large", "gpt2_large", "gpt3_xl", "gpt3_27", "opt_13")
#: NeuSight's GPU folder -> our device entry
DEVICES = {"NVIDIA_H100_80GB_HBM3": "h100", "NVIDIA_L4": "l4", "NVIDIA_A100-PCIE-40GB": "a100-40gb",
           "NVIDIA_A100-SXM4-40GB": "a100-sxm4-40gb", "NVIDIA_A100_80GB_PCIe": "a100-80gb",
           "Tesla_V100-PCIE-32GB": "v100", "Tesla_T4": "t4", "Tesla_P100-PCIE-16GB": "p100",
           "Tesla_P4": "p4"}
#: GPUs whose single operators the prior was fitted on (the others are held out entirely)
KERNEL_GPUS = ("a100-40gb", "v100", "t4", "p100", "p4")
FIELDS = ("gpu", "device", "model", "mode", "seq", "batch", "num_layer", "e2e_ms", "fw_ms", "bw_ms",
          "source", "commit")
_NAME = re.compile(r"^(?P<model>[a-z0-9_]+)-(?P<mode>inf|train)-(?P<seq>\d+)-(?P<batch>\d+)\.json$")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def collect_labels(repo: Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """(label rows, model name -> config JSON text) from a clone's HEAD."""
    commit = _git(repo, "rev-parse", "HEAD").strip()
    rows = []
    for path in _git(repo, "ls-tree", "-r", "--name-only", "HEAD", LABEL_DIR).splitlines():
        gpu, name = path.split("/")[-2:]
        m = _NAME.match(name)  # fused (-fusion) and multi-GPU (-dp4, -tp4, -pp4_1) runs do not match
        if m is None or m["model"] not in MODELS:
            continue
        doc = json.loads(_git(repo, "show", f"HEAD:{path}"))
        rows.append({"gpu": gpu, "device": DEVICES.get(gpu, ""), "model": m["model"],
                     "mode": "inference" if m["mode"] == "inf" else "train",
                     "seq": int(m["seq"]), "batch": int(m["batch"]), "num_layer": int(doc["num_layer"]),
                     "e2e_ms": float(doc["e2e_latency"]), "fw_ms": float(doc["fw_latency"]),
                     "bw_ms": float(doc["bwall_latency"]), "source": path, "commit": commit})
    configs = {m: _git(repo, "show", f"HEAD:{CONFIG_DIR}/{m}.json") for m in MODELS}
    rows.sort(key=lambda r: (r["gpu"], r["model"], r["mode"], r["seq"], r["batch"]))
    return rows, configs


def write_labels(rows: list[dict[str, Any]], configs: dict[str, str], folder: Path = DATA) -> None:
    (folder / "configs").mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_bytes(folder / "labels.csv", buf.getvalue().encode())
    for name, text in configs.items():
        atomic_write_bytes(folder / "configs" / f"{name}.json", text.encode())


def read_labels(folder: Path = DATA) -> list[dict[str, Any]]:
    with open(folder / "labels.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        for k in ("seq", "batch", "num_layer"):
            r[k] = int(r[k])
        for k in ("e2e_ms", "fw_ms", "bw_ms"):
            r[k] = float(r[k])
    return rows


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


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    by: dict[str, dict[str, float]] = {}
    for dev in sorted({r["device"] for r in rows}):
        e = np.array([r["error"] for r in rows if r["device"] == dev])
        by[dev] = {"n": len(e), "mape": float(np.mean(np.abs(e)) * 100),
                   "median_error": float(np.median(e) * 100), "max_abs": float(np.max(np.abs(e)) * 100)}
    return by


def corrected(corr: Correction, row: dict[str, Any]) -> float:
    """A row's prediction (``predicted_ms``, ``launch_ms`` inside it) with
    ``corr`` applied as the runtime applies it (kernel time only)."""
    return float(corr.apply(row["predicted_ms"] - row["launch_ms"])) + row["launch_ms"]


def lomo_scale(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Leave-one-model-out check of a pure-scale calibration on one device's
    inference rows (``predicted_ms``, ``launch_ms``, ``e2e_ms``,
    ``families``: the kernel families of the prediction): per held-out model
    a scale fitted on the other models' kernel time (:func:`fit_correction`,
    launch overhead out of both sides), covering the families the rows hold."""
    errors = []
    families = tuple(sorted({f for r in rows for f in r["families"]}))
    def fit(on: list[dict[str, Any]]) -> Correction:  # on kernel time: launches out of both
        return fit_correction([r["predicted_ms"] - r["launch_ms"] for r in on],
                              [r["e2e_ms"] - r["launch_ms"] for r in on], families)

    for model in sorted({r["model"] for r in rows}):
        corr = fit([r for r in rows if r["model"] != model])
        errors += [corrected(corr, r) / r["e2e_ms"] - 1 for r in rows if r["model"] == model]
    e = np.array(errors)
    full = fit(rows)
    return {"n": len(e), "mape": float(np.mean(np.abs(e)) * 100), "median_error": float(np.median(e) * 100),
            "max_abs": float(np.max(np.abs(e)) * 100),
            "uncalibrated_mape": float(np.mean([abs(r["predicted_ms"] / r["e2e_ms"] - 1) for r in rows]) * 100),
            "scale": float(np.exp(full.alpha)), "correction": full.to_dict()}


def calibrations(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The plan's calibrations (``neusight_calibration_plan.md``): every
    kernel-row entry's leave-one-model-out check, ``ship`` where it beats
    the uncalibrated prior on the same labels."""
    out = {}
    for dev in KERNEL_GPUS:
        rows = [r for r in doc["rows"] if r["device"] == dev]
        if len({r["model"] for r in rows}) < 2 or len(rows) < 4:
            continue  # a leave-one-model-out fit needs 3 pairs from other models
        check = lomo_scale(rows)
        check["ship"] = check["mape"] < check["uncalibrated_mape"]
        out[dev] = check
    return out


def _report(report: Path) -> dict[str, Any] | None:
    return json.loads(report.read_text()) if report.exists() else None


def _source(doc: dict[str, Any]) -> str:
    return f"NeuSight, {SOURCE} {doc['commit'][:12]}, PyTorch 2.1 eager fp32"


def whole_model_accuracy(device: str, report: Path = OUT / "neusight_e2e.json") -> dict[str, Any] | None:
    """The ``accuracy.whole_model`` field of ``device``'s manifest from the
    report (None: no report or no labels for it): the prior's figures, or
    for an entry calibrated on these labels the leave-one-model-out ones."""
    doc = _report(report)
    s = doc["summary"].get(device) if doc else None
    if doc is None or s is None:
        return None
    cal = doc.get("calibrations", {}).get(device)
    if cal and cal["ship"]:
        return {"labels": int(cal["n"]), "mape": round(cal["mape"], 2),
                "median_error": round(cal["median_error"], 2),
                "source": _source(doc) + "; calibrated on them, leave-one-model-out",
                "meaning": "whole-model forward latency MAPE % of the calibrated entry, each model "
                           "predicted with a scale fitted on the other models' labels "
                           f"(uncalibrated: {cal['uncalibrated_mape']:.1f} %; "
                           "reports/gpu-prior/neusight_e2e.md)"}
    return {"labels": int(s["n"]), "mape": round(s["mape"], 2), "median_error": round(s["median_error"], 2),
            "source": _source(doc),
            "meaning": "whole-model forward latency MAPE % against the published measurements "
                       "(reports/gpu-prior/neusight_e2e.md)"}


def calibration_of(device: str, report: Path = OUT / "neusight_e2e.json"
                   ) -> tuple[dict[str, Any] | None, str | None]:
    """(``calibration``, ``calibration_source``) of ``device``'s manifest
    under the plan (``neusight_calibration_plan.md``); (None, None) where
    it ships none."""
    doc = _report(report)
    cal = doc.get("calibrations", {}).get(device) if doc else None
    if doc is None or not cal or not cal["ship"]:
        return None, None
    return cal["correction"], (f"{cal['n']} whole-model inference latencies of "
                               f"{len({r['model'] for r in doc['rows'] if r['device'] == device})} "
                               f"transformers, {_source(doc)}; leave-one-model-out MAPE "
                               f"{cal['mape']:.1f} % (uncalibrated {cal['uncalibrated_mape']:.1f} %)")


def record(root: Path = REPO / "exported_models") -> list[str]:
    """Write each device entry's ``accuracy.whole_model`` and, under the
    plan, its ``calibration`` from the report; returns the entries changed."""
    changed = []
    for manifest in sorted(root.glob("*/manifest.json")):
        doc = json.loads(manifest.read_text())
        if doc.get("kind") != "gpu-prior":
            continue
        name = doc["device"]["name"]
        new = dict(doc, accuracy={**doc["accuracy"]})
        whole = whole_model_accuracy(name)
        if whole is not None:
            new["accuracy"]["whole_model"] = whole
        new["calibration"], new["calibration_source"] = calibration_of(name)
        if new != doc:
            atomic_write_bytes(manifest, json.dumps(new, indent=1).encode())
            changed.append(name)
    return changed


def summary_table(by: dict[str, dict[str, float]]) -> list[str]:
    """Markdown rows of a :func:`summary`, header included."""
    lines = ["| device | labels | MAPE % | median error % | max abs error % |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for dev, s in by.items():
        held = "" if dev in KERNEL_GPUS else " (no kernel rows)"
        lines.append(f"| {dev}{held} | {s['n']} | {s['mape']:.1f} | {s['median_error']:+.1f} | "
                     f"{s['max_abs']:.1f} |")
    return lines


def write_report(doc: dict[str, Any]) -> None:
    rows = doc["rows"]
    doc["summary"] = summary(rows)
    doc["train_summary"] = summary(doc["train_rows"])
    doc["calibrations"] = calibrations(doc)
    for r in doc["train_rows"]:  # the plan's cross-task check: inference-fitted scales on training
        cal = doc["calibrations"].get(r["device"])
        r["calibrated_error"] = (round(corrected(Correction(**cal["correction"]), r) / r["e2e_ms"] - 1, 4)
                                 if cal and cal["ship"] else None)
    atomic_write_bytes(OUT / "neusight_e2e.json", json.dumps(doc, indent=1).encode())
    lines = ["# The GPU prior on whole-model latencies measured by others (NeuSight)\n",
             "`python -m training.gpuprior.neusight_e2e check` (labels: `data/neusight-e2e/`, "
             f"from `{SOURCE}` at {doc['commit'][:12]}). Each label is a whole-model forward pass "
             "measured by the NeuSight authors: PyTorch 2.1 eager, fp32, CUDA events, the mean of "
             "the fastest 5 of 25 runs. Each prediction is `perfseer-rt predict --device D "
             "--batch B --dim seq=S` on our structure-only export of the same Hugging Face config. "
             "Error = predicted / measured - 1. The prior's kernel rows come from "
             f"{', '.join(KERNEL_GPUS)} (single operators only); the H100, L4 and A100-SXM4 have "
             "no rows at all.\n",
             *summary_table(doc["summary"])]
    lines += ["\n| device | model | batch | seq | measured ms | predicted ms | error % |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['device']} | {r['model']} | {r['batch']} | {r['seq']} | {r['e2e_ms']:.2f} | "
                     f"{r['predicted_ms']:.2f} | {r['error'] * 100:+.1f} |")
    lines += ["\n## Training step (forward + backward)\n",
              "`predict --mode train --device D` prices one step from the forward kernels "
              "(`perfseer_rt/gpu/train_step.py`: backward kernels per forward kernel, a "
              "cross-entropy loss, an AdamW update). NeuSight timed `model(input_ids)` with the "
              "model in train mode (dropout on) and `loss.backward()` separately, without an "
              "optimizer step; so the comparison is our forward against their forward and our "
              "loss + backward against their backward, the AdamW update shown beside.\n",
              *summary_table(doc["train_summary"])]
    lines += ["\n| device | model | batch | seq | measured fw / bw ms | predicted fw / bw ms | "
              "error (fw+bw) % | AdamW ms |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in doc["train_rows"]:
        lines.append(f"| {r['device']} | {r['model']} | {r['batch']} | {r['seq']} | {r['fw_ms']:.1f} / "
                     f"{r['bw_ms']:.1f} | {r['predicted_fw_ms']:.1f} / {r['predicted_bw_ms']:.1f} | "
                     f"{r['error'] * 100:+.1f} | {r['optimizer_ms']:.1f} |")
    lines += ["\n## Calibrated entries (plan: `neusight_calibration_plan.md`)\n",
              "Each kernel-row entry with labels of at least two models gets a pure scale fitted on "
              "its inference labels, shipped where its leave-one-model-out MAPE (each model predicted "
              "with the scale fitted on the other models) beats the uncalibrated prior on the same "
              "labels. h100 and l4 stay uncalibrated: their figures above are the zero-shot check.\n",
              "| device | labels | uncalibrated MAPE % | leave-one-model-out MAPE % | median % | scale | shipped |",
              "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for dev, c in doc["calibrations"].items():
        lines.append(f"| {dev} | {c['n']} | {c['uncalibrated_mape']:.1f} | {c['mape']:.1f} | "
                     f"{c['median_error']:+.1f} | {c['scale']:.3f} | {'yes' if c['ship'] else 'no'} |")
    crossed = [r for r in doc["train_rows"] if r["calibrated_error"] is not None]
    if crossed:
        before = np.mean([abs(r["error"]) for r in crossed]) * 100
        after = np.mean([abs(r["calibrated_error"]) for r in crossed]) * 100
        lines.append(f"\nCross-task check (inference-fitted scale on the training labels of calibrated "
                     f"entries, {len(crossed)} runs: "
                     + ", ".join(f"{r['device']} {r['model']} b{r['batch']} {r['error'] * 100:+.1f} -> "
                                 f"{r['calibrated_error'] * 100:+.1f} %" for r in crossed)
                     + f"): MAPE {before:.1f} -> {after:.1f} %.")
    lines.append("\nLayer extrapolation against a full export (same prior, same shapes):\n")
    for a in doc["additivity"]:
        lines.append(f"- {a['model']} on {a['device']} (batch {a['batch']}, seq {a['seq']}): full "
                     f"{a['full_export_ms']:.3f} ms, from 1 and 2 layers {a['from_1_and_2_layers_ms']:.3f} ms")
    atomic_write_bytes(OUT / "neusight_e2e.md", ("\n".join(lines) + "\n").encode())
    print("\n".join(lines))


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
