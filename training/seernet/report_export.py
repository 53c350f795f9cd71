"""The report's shipped predictor on disk: the ONNX files (SeerNet, SeerNet-Multi,
SeerNet blended with the GBM), the out-of-distribution reference and
``manifest.json`` (:mod:`training.seernet.manifest`), and what a
training-step dataset's labels timed."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict import uncertainty as ru
from perfseer_rt.predict.manifest import concat_graphs
from training.seernet import data, ensemble
from training.seernet.export import export_seernet, run_onnx
from training.seernet.manifest import model_entry, write_manifest
from training.seernet.seernet import StackedPredictor
from training.seernet.shared_weights import share_weights

#: SeerNet blended with the GBM (:mod:`training.seernet.ensemble`): not a
#: trained model of its own, built in every split that trains both.
BLEND = "seernet_gbm"
#: The models that ship (exported to ONNX) and so get calibrated intervals.
SHIPPABLE = ("seernet", "seernet_multi", BLEND)
#: File of the training graphs' distance features beside the exported model.
OOD_REFERENCE = "ood_reference.npy"
#: Neighbours behind the distance score.
OOD_K = 5
#: Weight storage of the exported SeerNets by mode (:mod:`training.seernet.compact_weights`):
#: half precision for inference (the default device's predictor; predictions
#: moved 4e-4 at most), int8 per output channel for the training-step
#: predictor (moved 3e-3 at most), so that the install stays within 12 MB of
#: our own files (docs/install.md, "Size").
STORAGE = {"inference": "float16", "train": "int8"}


def mode_and_step(records: list[dict]) -> tuple[str, dict | None]:
    """``("train", step)`` for training-step records (``kind`` ``"train"``: one
    torch optimizer step, :mod:`training.profile_train`), else
    ``("inference", None)``; the step says what every label timed."""
    kinds = {r.get("kind", "inference") for r in records}
    if kinds != {"train"}:
        if "train" in kinds:
            raise data.DatasetError(f"records of kinds {sorted(kinds)}: inference and training "
                                    "steps do not train one predictor")
        return "inference", None

    def one(values, what):
        found = set(values) - {None}
        if len(found) > 1:
            raise data.DatasetError(f"training-step records with more than one {what}: {sorted(found)}")
        return next(iter(found), None)

    optimizer = one(((r.get("quality") or {}).get("optimizer") for r in records), "optimizer")
    threads = one(((r.get("provider") or {}).get("threads") for r in records), "thread count")
    method = data.check_one_memory_method("records", records)
    dev = one((r.get("device") for r in records), "device")
    cpu = one(((r.get("env") or {}).get("cpu_model") for r in records), "CPU")
    update = {"sgd": "SGD (momentum 0.9, lr 0.001)", "adam": "Adam (lr 0.001)"}.get(optimizer,
                                                                                  str(optimizer))
    return "train", {
        "engine": "torch", "optimizer": str(optimizer), "precision": "fp32", "threads": threads,
        "peak_mem_method": method, "dataset_device": str(dev),
        "definition": ("one torch training step on the CPU: zero_grad, forward, cross-entropy "
                       f"loss against fixed labels, backward, {update} update; fp32"
                       + (f", {threads} intra-op thread{'s' if threads != 1 else ''}" if threads else "")
                       + (f", {cpu}" if cpu else "")),
    }


def export(export_dir: Path, shipped: dict, metrics: list[str], report: dict, device: str | None,
           records: list[dict], export_device: str | None = None) -> dict:
    """Write the shipped models, the OOD reference and ``manifest.json`` to
    ``export_dir``; ``records`` are the dataset's successful records of
    ``device`` (their environment describes the predictor)."""
    norm, trained = shipped["norm"], shipped["trained"]
    train_metrics = list(norm.metrics)
    entries = []
    storage = STORAGE[report["mode"]]
    if trained.get("seernet"):
        per_metric = trained["seernet"]
        stacked = StackedPredictor([per_metric[m] for m in train_metrics]) if len(per_metric) > 1 \
            else next(iter(per_metric.values()))
        path = export_seernet(stacked, norm, export_dir / "seernet.onnx", train_metrics, storage=storage)
        entries.append(model_entry(path, "seernet", train_metrics, parameters(stacked),
                                   kind="SeerNet, one per metric"))
    if trained.get("seernet_multi"):
        multi = next(iter(trained["seernet_multi"].values()))
        path = export_seernet(multi, norm, export_dir / "seernet_multi.onnx", train_metrics, storage=storage)
        entries.append(model_entry(path, "seernet_multi", train_metrics, parameters(multi),
                                   kind="SeerNet-Multi (PCGrad)"))
    if trained.get(BLEND) and trained.get("gbm") and trained.get("seernet"):
        entries.append(export_blend(export_dir, shipped, metrics, entries[0]))
    accuracy = {scheme: {n: {m: {k: r["metrics"][m][k] for k in ("mape", "within_10", "count")}
                             for m in train_metrics} | {"mean_mape": r["mean_mape"]}
                         for n, r in res["models"].items() if n in SHIPPABLE}
                for scheme, res in report["splits"].items() if "models" in res}
    env = next((r.get("env") for r in records), None)
    mode, step = report["mode"], report["step"]
    name = export_device or device or export_dir.name
    files = [e["file"] for e in entries]
    uncertainty = None
    if "uncertainty" in shipped:
        ref = export_dir / OOD_REFERENCE
        buf = io.BytesIO()
        # half precision: 0.38 of its 0.76 MB; the distance scores move 8.5e-4 at most
        # (relative; no warning and no interval changed on the golden graphs)
        np.save(buf, np.asarray(shipped["reference"]).astype(np.float16))
        atomic_write_bytes(ref, buf.getvalue())
        files.append(ref.name)
        uncertainty = {"k": OOD_K, "features": list(ru.FEATURE_NAMES),
                       "mean": shipped["ood_mean"].tolist(), "std": shipped["ood_std"].tolist(),
                       "reference_file": ref.name,
                       "reference_sha256": hashlib.sha256(buf.getvalue()).hexdigest(),
                       **shipped["uncertainty"]}
    memory = None
    if all(m in train_metrics for m in ("peak_mem_mb", "load_peak_mb", "run_peak_mb")):
        base = [r["quality"]["peak_mem_process_mb"] - r["metrics"]["peak_mem_mb"] for r in records
                if (r.get("quality") or {}).get("peak_mem_process_mb") and (r.get("metrics") or {}).get("peak_mem_mb")]
        memory = {"peak": "peak_mem_mb", "load": "load_peak_mb", "run": "run_peak_mb",
                  "combine": shipped.get("memory_combine", "direct"),
                  "baseline_mb": float(np.median(base)) if base else None,
                  "baseline": f"median over {len(base)} measured configurations of the measuring "
                              "process's peak RSS minus its peak over the baseline: the process "
                              "after importing onnxruntime, before the model is loaded"}
    write_manifest(export_dir / "manifest.json", device=name, description=env or name,
                   metrics=train_metrics, normalization=norm, models=entries,
                   training_data=report["data"], accuracy=accuracy, default_model=shipped["default"],
                   report={"command": report["command"], "trained_on_split": shipped["scheme"]
                           + (f"+{shipped['refit']}" if shipped.get("refit") else "")},
                   uncertainty=uncertainty, memory=memory, mode=mode, step=step)
    return {"dir": str(export_dir), "files": files + ["manifest.json"]}


def export_blend(export_dir: Path, shipped: dict, metrics: list[str], seernet: dict) -> dict:
    """``seernet_gbm.onnx`` (:func:`ensemble.export_blend`; its SeerNet weights
    stored as references into ``seernet.onnx``, :mod:`training.seernet.shared_weights`), checked: on the
    shipped split's test graphs it must give the predictions scored in the
    report (relative 1e-3)."""
    norm, trained = shipped["norm"], shipped["trained"]
    train_metrics = list(norm.metrics)
    by_metric = dict(zip(metrics, trained[BLEND]["weights"]))
    weights = [by_metric[m] for m in train_metrics]
    path = ensemble.export_blend(export_dir / seernet["file"], trained["gbm"]["gbm"], norm, train_metrics,
                                 weights, export_dir / f"{BLEND}.onnx")
    share_weights(path, export_dir / seernet["file"])  # its SeerNet read from seernet.onnx: shipped once
    on_test = bool(shipped["parts"]["test"])
    samples = shipped["parts"]["test" if on_test else "val"]
    if samples:
        feeds = concat_graphs([s.x for s in samples], [s.edge_index for s in samples],
                              [s.edge_attr for s in samples], [s.u for s in samples])
        got = run_onnx(path, **feeds, output="y")
        res = shipped["result"]
        cols = [metrics.index(m) for m in train_metrics]
        scored = {k: (res["models"][k]["predictions"] if on_test else res["val_predictions"][k])
                  for k in (BLEND, "seernet", "gbm") if k in (res["models"] if on_test else res["val_predictions"])}
        want = scored[BLEND][:, cols]
        rel = np.abs(got - want) / np.abs(want)
        if not np.all(rel <= 1e-3):
            raise RuntimeError(f"{path}: onnxruntime differs from the scored blend (max rel {np.nanmax(rel):.2e})")
        if "seernet" in scored and "gbm" in scored:  # the disagreement output, in log units
            want_gap = ensemble.gap(scored["seernet"], scored["gbm"])[:, cols]
            diff = np.abs(run_onnx(path, **feeds, output=ensemble.GAP_OUTPUT) - want_gap)
            if not np.all(diff <= 2e-3):
                raise RuntimeError(f"{path}: onnxruntime's {ensemble.GAP_OUTPUT!r} differs from the scored "
                                   f"models' (max {np.nanmax(diff):.2e})")
    kind = "SeerNet (one per metric) blended with a global-features GBM; SeerNet weight " + \
        ", ".join(f"{m} {w:g}" for m, w in zip(train_metrics, weights))
    return model_entry(path, BLEND, train_metrics, seernet["parameters"], kind=kind)


def parameters(model) -> int:
    """Trainable parameters of a torch model."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))
