"""Training-step predictions (``predict --mode train``): manifest mode/step, the
device's train/ entry, the result contract, CLI errors.

Mechanics run on an UNTRAINED SeerNet exported to a temporary exported_models
folder (a device with a train/ entry and one without); the shipped
cpu-amd-epyc-1t training-step predictor is checked at the end (its accuracy is
in reports/cpu-amd-epyc-1t-train).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")

from perfseer_rt.cli import main  # noqa: E402
from perfseer_rt.errors import DeviceError  # noqa: E402
from perfseer_rt.predict import api, registry, seernet_run, train_mode  # noqa: E402
from perfseer_rt.predict.manifest import ManifestError, parse_manifest  # noqa: E402
from tests.test_extract import conv_chain  # noqa: E402

ROOT = Path(__file__).parents[1]
TRAIN = ["step_ms", "peak_mem_mb"]
INFER = ["latency_ms", "peak_mem_mb"]
STEP = {"engine": "torch", "optimizer": "sgd", "precision": "fp32", "threads": 1,
        "peak_mem_method": "vmhwm", "dataset_device": "cpu-test-1t-torch",
        "definition": "one torch training step on the CPU: zero_grad, forward, cross-entropy loss "
                      "against fixed labels, backward, SGD (momentum 0.9, lr 0.001) update; fp32, "
                      "1 intra-op thread, Test CPU"}
ENV = {"cpu_model": "Test CPU", "cpu_cores": 2, "gpu_name": None, "onnxruntime_version": "1.0"}


def _export(folder: Path, metrics: list[str], **manifest_kwargs) -> None:
    from perfseer_rt import extract
    from training.seernet import Normalization, from_perfgraph
    from training.seernet.export import export_seernet
    from training.seernet.manifest import model_entry, write_manifest
    from training.seernet.models import build, default_config

    graphs = [extract(conv_chain(), batch=b) for b in (1, 2, 4, 8)]
    samples = [from_perfgraph(g, {m: 10.0 * (i + 1) * (j + 1) for j, m in enumerate(metrics)})
               for i, g in enumerate(graphs)]
    norm = Normalization.fit(samples, metrics)
    torch.manual_seed(0)
    model = build("seernet_multi", default_config("seernet_multi", metrics, norm, samples)).eval()
    export_seernet(model, norm, folder / "seernet_multi.onnx", metrics=metrics)
    write_manifest(folder / "manifest.json", device="cpu-test-1t", description=ENV,
                   metrics=metrics, normalization=norm,
                   models=[model_entry(folder / "seernet_multi.onnx", "seernet_multi", metrics, 1)],
                   training_data={"configurations": 4, "architectures": 1, "families": {"t": 4},
                                  "flops_total": {"min": 1e3, "max": 1e12}, "metrics": {},
                                  "nodes": {"min": 1, "max": 500}, "batch_sizes": [1, 2, 4, 8]},
                   accuracy={"arch": {"seernet_multi": {"step_ms": {"mape": 12.5, "count": 10}}}},
                   **manifest_kwargs)


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("exported_models")
    _export(root / "cpu-test-1t", INFER)
    _export(root / "cpu-test-1t" / "train", TRAIN, mode="train", step=STEP)
    other = root / "cpu-other-1t"  # a device without a train/ entry
    other.mkdir()
    doc = json.loads((root / "cpu-test-1t/manifest.json").read_text())
    doc["device"]["name"] = "cpu-other-1t"
    (other / "manifest.json").write_text(json.dumps(doc))
    (other / "seernet_multi.onnx").write_bytes((root / "cpu-test-1t/seernet_multi.onnx").read_bytes())
    return root


@pytest.fixture()
def shipped(models_dir, monkeypatch):
    monkeypatch.setattr(registry, "models_root", lambda: models_dir)
    registry.predictors.cache_clear()
    train_mode.train_predictors.cache_clear()
    seernet_run._session.cache_clear()
    yield models_dir
    registry.predictors.cache_clear()
    train_mode.train_predictors.cache_clear()


# ----------------------------------------------------------------- manifest
def test_train_manifest_round_trips_and_says_its_step(models_dir):
    doc = json.loads((models_dir / "cpu-test-1t/train/manifest.json").read_text())
    m = parse_manifest(doc)
    assert m.mode == "train" and m.step.peak_mem_method == "vmhwm" and m.step.engine == "torch"
    assert m.to_dict() == doc


def test_an_inference_manifest_says_its_mode_and_a_version_2_one_meant_inference(models_dir):
    doc = json.loads((models_dir / "cpu-test-1t/manifest.json").read_text())
    assert doc["mode"] == "inference" and doc["step"] is None  # version 3: every field written
    m = parse_manifest(doc)
    assert m.mode == "inference" and m.step is None and m.to_dict() == doc
    v2 = {k: v for k, v in doc.items() if k not in ("mode", "step")}  # version 2 could leave them out
    v2["schema_version"] = 2
    v2["seernet"] = {k: v for k, v in doc["seernet"].items() if k not in ("uncertainty", "memory", "field_scale")}
    v2["training_data"] = {k: v for k, v in doc["training_data"].items() if k != "ops"}
    assert parse_manifest(v2).mode == "inference"
    del doc["mode"]  # version 3 does not
    with pytest.raises(ManifestError, match="manifest field mode is missing"):
        parse_manifest(doc)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("step"), "field step is missing"),
    (lambda d: d.update(mode="serve"), "mode: 'serve' is not one of"),
    (lambda d: d["step"].pop("peak_mem_method"), "step.peak_mem_method is missing"),
    (lambda d: d["step"].update(threads="one"), "step.threads"),
    (lambda d: d["step"].update(extra=1), "step.extra is not in schema"),
    (lambda d: d.update(mode="inference"), "step: set on a predictor of mode 'inference'"),
])
def test_a_bad_train_manifest_is_named(models_dir, change, message):
    doc = copy.deepcopy(json.loads((models_dir / "cpu-test-1t/train/manifest.json").read_text()))
    change(doc)
    with pytest.raises(ManifestError, match=message):
        parse_manifest(doc)


# ------------------------------------------------------------------ runtime
def test_predict_train_mode_contract(shipped):
    [r] = api.predict(conv_chain(), batch=4, mode="train")
    assert r["mode"] == "train" and r["device"] == "cpu-test-1t" and r["batch"] == 4
    assert list(r["metrics"]) == TRAIN
    assert r["metrics"]["step_ms"]["unit"] == "ms" and r["metrics"]["peak_mem_mb"]["unit"] == "MiB"
    assert all(np.isfinite(m["value"]) and m["value"] > 0 for m in r["metrics"].values())
    assert "training step" in r["metrics"]["step_ms"]["meaning"]
    assert "method vmhwm" in r["metrics"]["peak_mem_mb"]["meaning"]
    assert "before the model was built" in r["metrics"]["peak_mem_mb"]["meaning"]
    desc = r["predictor"]["description"]
    assert "SGD" in desc and "fp32" in desc and "1 intra-op thread" in desc
    assert "Test CPU" in desc and "torch, not onnxruntime" in desc
    assert r["predictor"]["device"] == "cpu-test-1t"
    # the same device's inference predictor answers another question
    [inf] = api.predict(conv_chain(), batch=4, device="cpu-test-1t")
    assert inf["mode"] == "inference" and list(inf["metrics"]) == INFER
    assert "onnxruntime" in inf["predictor"]["description"]


def test_train_entry_is_not_a_device_of_its_own(shipped):
    assert sorted(registry.predictors()) == ["cpu-other-1t", "cpu-test-1t"]
    assert sorted(train_mode.train_predictors()) == ["cpu-test-1t"]


def test_train_mode_errors(shipped):
    with pytest.raises(DeviceError, match="mode 'serve': choose one of inference, train"):
        api.predict(conv_chain(), mode="serve")
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        api.predict(conv_chain(), device="tpu", mode="train")
    with pytest.raises(DeviceError, match="'cpu-other-1t' has no training-step predictor "
                                          r"\(--mode train\); devices with one: cpu-test-1t"):
        api.predict(conv_chain(), device="cpu-other-1t", mode="train")


def test_cli_mode_train(shipped, tmp_path):
    import onnx

    path = tmp_path / "m.onnx"
    onnx.save(conv_chain(), path)
    res = CliRunner().invoke(main, ["predict", str(path), "--mode", "train", "--batch", "1,8",
                                    "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["batch"] for r in rows] == [1, 8] and {r["mode"] for r in rows} == {"train"}
    assert all(list(r["metrics"]) == TRAIN for r in rows)
    table = CliRunner().invoke(main, ["predict", str(path), "--mode", "train"])
    assert table.exit_code == 0 and "mode       train" in table.output
    assert "step_ms [ms]" in table.output and "step_ms: median wall time of one training step" \
        in table.output


def test_cli_mode_train_without_a_train_predictor_is_one_line_and_exit_2(shipped, tmp_path):
    import onnx

    path = tmp_path / "m.onnx"
    onnx.save(conv_chain(), path)
    for device, message in (("cpu-other-1t", "has no training-step predictor"),
                            ("tpu", "unknown device 'tpu'")):
        res = CliRunner().invoke(main, ["predict", str(path), "--mode", "train", "--device", device])
        assert res.exit_code == 2 and message in res.output
        assert res.output.count("\n") == 1 and "Traceback" not in res.output
    res = CliRunner().invoke(main, ["predict", str(path), "--mode", "serve"])
    assert res.exit_code == 2 and "'serve' is not one of 'inference', 'train'" in res.output
    assert "Traceback" not in res.output


# ------------------------------------------------------------ shipped entry
SHIPPED_TRAIN = ROOT / "exported_models/cpu-amd-epyc-1t/train/manifest.json"


@pytest.mark.skipif(not SHIPPED_TRAIN.exists(), reason="no shipped training-step predictor")
def test_shipped_cpu_training_step_predictor():
    registry.predictors.cache_clear()
    train_mode.train_predictors.cache_clear()
    doc = json.loads(SHIPPED_TRAIN.read_text())
    m = parse_manifest(doc)
    assert m.mode == "train" and m.step.peak_mem_method == "vmhwm" and m.step.threads == 1
    assert m.step.engine == "torch" and m.step.dataset_device == "cpu-amd-epyc-1t-torch"
    assert m.metric_names == TRAIN and m.to_dict() == doc
    train = api.predict("examples/resnet18.onnx", batch=1, mode="train")[0]
    train16 = api.predict("examples/resnet18.onnx", batch=16, mode="train")[0]
    infer = api.predict("examples/resnet18.onnx", batch=1, device="cpu-amd-epyc-1t")[0]
    assert train["mode"] == "train" and train["device"] == "cpu-amd-epyc-1t"
    # a training step (forward + backward + update) costs more than one inference call
    assert train["metrics"]["step_ms"]["value"] > infer["metrics"]["latency_ms"]["value"]
    # and 16 samples more than one
    assert train16["metrics"]["step_ms"]["value"] > 2 * train["metrics"]["step_ms"]["value"]
    assert "AMD EPYC" in train["predictor"]["description"]


def test_train_mode_imports_no_torch():
    code = ("import sys, perfseer_rt\n"
            "from perfseer_rt.predict import train_mode\n"
            "train_mode.train_predictors()\n"
            "print(','.join(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def test_devices_names_the_training_step_predictor(shipped):
    rows = {r["device"]: r for r in json.loads(
        CliRunner().invoke(main, ["devices", "--json"]).output)}
    assert rows["cpu-other-1t"]["train_mode"] is None
    t = rows["cpu-test-1t"]["train_mode"]
    assert [m["name"] for m in t["metrics"]] == TRAIN and t["metrics"][0]["test_mape_pct"] == 12.5
    assert t["metrics"][1]["unit"] == "MiB" and "SGD" in t["description"]
    text = CliRunner().invoke(main, ["devices"]).output
    assert text.count("training step (--mode train)") == 1
