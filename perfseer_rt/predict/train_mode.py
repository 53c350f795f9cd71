"""Training-step predictions (``predict --mode train``): one optimizer step, not one inference.

A device may ship a second predictor beside its inference one::

    exported_models/<device>/manifest.json         mode "inference" (onnxruntime)
    exported_models/<device>/train/manifest.json   mode "train": labels of one
                                                   training step (torch), metrics
                                                   step_ms and peak_mem_mb

The train manifest follows the same strict schema
(:mod:`perfseer_rt.predict.manifest`) with ``mode: "train"`` and a ``step``
block saying what one label timed (engine, optimizer, precision, threads,
memory method). It is never listed as a device of its own: it is the
training-step predictor *of* the device named in its manifest, chosen with
``mode="train"``. The runtime only runs its ONNX file: no torch here.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from perfseer_rt.errors import DeviceError
from perfseer_rt.predict import local_cpu, registry
from perfseer_rt.predict.explain import predictor_info
from perfseer_rt.predict.manifest import MODES, ManifestError, TrainStep
from perfseer_rt.predict.registry import DEFAULT_DEVICES, MANIFEST, Predictor, typed_manifest

#: The sub-folder of a device entry holding its training-step predictor.
TRAIN_DIR = "train"

_STEP_MS = ("median wall time of one training step on one batch (zero_grad, forward, loss, "
            "backward, optimizer update) over the timed window, milliseconds")
_STEP_MEM = ("peak resident memory (VmHWM, method {method}) of the measuring process during the "
             "training step, over its RSS before the model was built, MiB (2**20 bytes): "
             "weights, gradients, optimizer state, activations kept for backward and the "
             "allocator's slack; the Python interpreter and torch's start-up memory are in the "
             "baseline, not here")


#: How a GPU device answers ``--mode train`` (:mod:`perfseer_rt.gpu.backward`).
GPU_STEP = ("one PyTorch eager training step: forward kernels, cross-entropy loss, the backward "
            "kernels autograd launches for each, the optimizer update (--optimizer, default "
            "AdamW), priced like inference (not measured by us: reports/gpu-learned/)")


def check_mode(mode: str) -> str:
    """``mode`` itself when known; DeviceError naming the known modes otherwise."""
    if mode not in MODES:
        raise DeviceError(f"mode {mode!r}: choose one of {', '.join(MODES)}")
    return mode


@lru_cache(maxsize=None)
def train_predictors() -> dict[str, Predictor]:
    """Every shipped training-step predictor by the device it belongs to.

    Raises:
        ManifestError: a train manifest that breaks the schema or is not of mode "train".
    """
    out: dict[str, Predictor] = {}
    for path in sorted(registry.models_root().glob(f"*/{TRAIN_DIR}/{MANIFEST}")):
        doc = json.loads(path.read_text())
        schema = typed_manifest(path, doc)
        if schema is None or schema.mode != "train":
            raise ManifestError(f"{path}: a {TRAIN_DIR}/ entry must be of mode 'train', "
                                f"not {getattr(schema, 'mode', doc.get('kind'))!r}")
        out[schema.device.name] = Predictor(schema.device.name, path.parent, doc, schema=schema)
    return out


def get_train_predictor(device: str | None) -> Predictor:
    """The training-step predictor of ``device`` (default: the first of
    ``DEFAULT_DEVICES`` that has one, else the first by name).

    Raises:
        DeviceError: an unknown device, or one without a training-step predictor
            (the message names those that have one).
    """
    found = train_predictors()
    if device is None:
        if not found:
            raise DeviceError("no training-step predictor is installed (--mode train); "
                              "`perfseer-rt devices` lists the inference ones")
        device = next((d for d in DEFAULT_DEVICES if d in found), sorted(found)[0])
    if device not in found:
        registry.get_predictor(device)  # an unknown device is named as such (with the known ones)
        have = ", ".join(sorted(found)) or "none installed"
        raise DeviceError(f"device {device!r} has no training-step predictor (--mode train); "
                          f"devices with one: {have}")
    return registry.check_layout(found[device], "training-step predictor of")


def predictor_for(device: str | None, mode: str) -> Predictor:
    """The predictor that answers ``mode`` on ``device``: the device's own for
    inference, and for training its training-step predictor, except on a
    GPU entry (kind ``gpu``), which prices the training step itself
    (:mod:`perfseer_rt.gpu.predictor`).

    Raises:
        DeviceError: as :func:`check_mode`, :func:`registry.get_predictor`
            and :func:`get_train_predictor`.
    """
    if check_mode(mode) == "inference":
        return registry.get_predictor(device)
    if device is not None and registry.get_predictor(device).kind in registry.GPU_KINDS:
        return registry.get_predictor(device)
    return get_train_predictor(device)


def _step(pred: Predictor) -> TrainStep:
    """The training step a train-mode predictor's labels timed (its manifest must say)."""
    if pred.schema is None or pred.schema.step is None:
        raise DeviceError(f"predictor {pred.device!r} does not say which training step it timed")
    return pred.schema.step


def description(pred: Predictor) -> str:
    """One line: the step, the engine, precision, threads and the CPU it was measured on."""
    step = _step(pred)
    desc = pred.manifest["device"].get("description")
    cpu = local_cpu.describe(desc) if isinstance(desc, dict) and desc.get("cpu_model") else None
    text = step.definition
    if cpu and (desc.get("cpu_model") not in text or "family" in cpu):
        text += f"; measured on {cpu}"
    return text + f" ({step.engine}, not onnxruntime)"


def meaning(pred: Predictor, metric: str) -> str | None:
    """What ``metric`` of a training-step prediction means (None: not one of ours)."""
    if metric == "step_ms":
        return _STEP_MS
    if metric.startswith("peak_mem"):
        return _STEP_MEM.format(method=_step(pred).peak_mem_method or "unrecorded")
    return None


def annotate(result: dict[str, Any], pred: Predictor, model: str | None = None) -> dict[str, Any]:
    """Fill what a training-step result says before the generic annotation
    (:func:`perfseer_rt.predict.explain.annotate`, which keeps keys present):
    ``mode`` "train", the predictor's description of the step, the metrics'
    meanings. A result of an inference predictor is returned untouched."""
    if pred.schema is None or pred.schema.mode != "train":
        return result
    result["mode"] = "train"
    info = predictor_info(pred, model)
    info["description"] = description(pred)
    result["predictor"] = info
    for name, m in result.get("metrics", {}).items():
        text = meaning(pred, name)
        if text:
            m["meaning"] = text
    return result


def summary(device: str) -> dict[str, Any] | None:
    """``perfseer-rt devices``: the training-step predictor of ``device`` in brief
    (what a step is, metrics with units and test MAPE); None when it has none."""
    pred = train_predictors().get(device)
    if pred is None:
        base = registry.predictors().get(device)
        if base is None or base.kind not in registry.GPU_KINDS:
            return None
        return {"description": GPU_STEP,
                "metrics": [{"name": "step_ms", "unit": "ms", "test_mape_pct": None}]
                + [{"name": m["name"], "unit": m["unit"], "test_mape_pct": None}
                   for m in base.manifest["metrics"] if m["name"] != "latency_ms"]}
    return {"description": description(pred),
            "metrics": [{"name": m, "unit": pred.unit(m).replace("MB", "MiB"),
                         "test_mape_pct": pred.test_accuracy(m).get("mape")} for m in pred.metrics]}
