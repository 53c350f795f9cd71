"""The GPU prior's whole-model check on NeuSight's published latencies
(training/gpuprior/neusight_e2e.py) and how its result reaches users."""

import json
from pathlib import Path

import numpy as np
import pytest

from perfseer_rt.gpu.manifest import WholeModelCheck, parse_gpu_prior
from perfseer_rt.predict import api
from perfseer_rt.predict.manifest import ManifestError
from training.gpuprior import neusight_calibration as C
from training.gpuprior import neusight_e2e as E
from training.gpuprior import neusight_labels as L

ROOT = Path(__file__).parents[1]
TINY_BERT = {"architectures": ["BertLMHeadModel"], "model_type": "bert", "hidden_size": 64,
             "intermediate_size": 256, "num_attention_heads": 4, "num_hidden_layers": 3,
             "vocab_size": 1000, "max_position_embeddings": 128, "type_vocab_size": 2}


def test_every_label_names_its_source_and_every_nvidia_gpu_a_shipped_entry():
    rows = L.read_labels()
    assert len(rows) >= 100
    shipped = {p.parent.name for p in (ROOT / "exported_models").glob("*/manifest.json")}
    for r in rows:
        assert r["source"].endswith(f"{r['model']}-{'inf' if r['mode'] == 'inference' else 'train'}"
                                    f"-{r['seq']}-{r['batch']}.json") and len(r["commit"]) == 40
        assert r["e2e_ms"] > 0 and r["e2e_ms"] == pytest.approx(r["fw_ms"] + r["bw_ms"])
        if r["gpu"].startswith(("NVIDIA", "Tesla")):
            assert r["device"] in shipped
    assert {r["model"] for r in rows} == set(L.MODELS)
    assert all((L.DATA / "configs" / f"{m}.json").exists() for m in L.MODELS)


def test_the_report_summary_and_the_manifests_agree_with_the_rows():
    doc = json.loads((L.OUT / "neusight_e2e.json").read_text())
    rows = doc["rows"]
    for r in rows:  # each error is the ratio of the two numbers beside it
        assert r["error"] == pytest.approx(r["predicted_ms"] / r["e2e_ms"] - 1, abs=1e-4)
    assert doc["summary"] == C.summary(rows)
    h100 = [r for r in rows if r["device"] == "h100"]
    assert doc["summary"]["h100"]["mape"] == pytest.approx(
        100 * np.mean([abs(r["error"]) for r in h100]))
    for dev in doc["summary"]:
        m = json.loads((ROOT / "exported_models" / dev / "manifest.json").read_text())
        assert m["accuracy"]["whole_model"] == C.whole_model_accuracy(dev)
        assert isinstance(parse_gpu_prior(m).accuracy["whole_model"], WholeModelCheck)
    for dev in {r["device"] for r in doc["train_rows"]}:
        m = json.loads((ROOT / "exported_models" / dev / "manifest.json").read_text())
        train = [r for r in doc["train_rows"] if r["device"] == dev]
        errors = [r["calibrated_error"] if m["calibration"] else r["error"] for r in train]
        assert m["accuracy"]["whole_model_train"] == C.whole_model_train_accuracy(dev)
        assert m["accuracy"]["whole_model_train"]["mape"] == pytest.approx(
            100 * np.mean(np.abs(errors)), abs=0.01)


def test_a_whole_model_block_is_typed_strictly():
    doc = json.loads((ROOT / "exported_models/h100/manifest.json").read_text())
    doc["accuracy"]["whole_model"]["surprise"] = 1
    with pytest.raises(ManifestError, match=r"accuracy\.whole_model"):
        parse_gpu_prior(doc)


def test_a_prediction_says_whether_whole_model_labels_check_its_gpu():
    path = str(ROOT / "examples" / "resnet18.onnx")
    (checked,) = api.predict(path, device="h100")
    (unchecked,) = api.predict(path, device="h200")
    mape = json.loads((ROOT / "exported_models/h100/manifest.json").read_text())[
        "accuracy"]["whole_model"]["mape"]
    assert f"whole-model check: MAPE {mape:.1f} %" in checked["metrics"]["latency_ms"]["meaning"]
    assert "no whole-model GPU labels for this GPU" in unchecked["metrics"]["latency_ms"]["meaning"]
    (step,) = api.predict(path, device="h100", mode="train")
    train_mape = json.loads((ROOT / "exported_models/h100/manifest.json").read_text())[
        "accuracy"]["whole_model_train"]["mape"]
    assert f"forward + backward: MAPE {train_mape:.1f} %" in step["metrics"]["step_ms"]["meaning"]


def test_layers_extrapolate_exactly_from_one_and_two(tmp_path):
    """The check predicts an L-layer model from exports with 1 and 2 layers;
    that is the full export's prediction because the prior sums kernels."""
    pytest.importorskip("torch")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "tiny.json").write_text(json.dumps(TINY_BERT))
    paths = {k: E.export_model("tiny", k, tmp_path / f"tiny-{k}.onnx", folder=tmp_path) for k in (1, 2)}
    full = E.export_model("tiny", None, tmp_path / "tiny-3.onnx", folder=tmp_path)
    assert not list(tmp_path.glob("*.data"))  # structure-only: no weights written
    for device in ("h100", "t4"):
        whole = E.predicted({3: full}, 3, device, batch=4, seq=64)["total"]
        # each family's part is rounded to 1e-4 ms (7 families at most): -P1 + 2 P2 and the
        # full one carry (1 + 2 + 1) * 7 * 0.5e-4 = 1.4e-3 ms at most
        assert E.predicted(paths, 3, device, batch=4, seq=64)["total"] == pytest.approx(whole, abs=1.4e-3)
        assert whole > E.predicted({2: paths[2]}, 2, device, batch=4, seq=64)["total"]


def test_leave_one_model_out_recovers_a_pure_scale_and_sees_a_model_apart():
    rows = [{"model": m, "predicted_ms": p, "e2e_ms": 0.5 * p, "families": ["linear"], "launch_ms": 0.0}
            for m, ps in (("a", (10.0, 20.0)), ("b", (5.0, 50.0)), ("c", (7.0, 70.0))) for p in ps]
    c = C.lomo_scale(rows)
    assert c["scale"] == pytest.approx(0.5) and c["mape"] == pytest.approx(0.0, abs=1e-9)
    assert c["correction"]["families"] == ("linear",)
    assert c["uncalibrated_mape"] == pytest.approx(100.0)
    rows[0]["e2e_ms"] = rows[1]["e2e_ms"] = 0.25 * 20.0  # model "a" runs at another scale...
    rows[0]["e2e_ms"] = 0.25 * 10.0
    # ...which a scale fitted on "b" and "c" alone cannot know: its two labels miss by 100 %
    assert C.lomo_scale(rows)["max_abs"] > 99.0


def test_shipped_calibrations_follow_the_registered_plan():
    doc = json.loads((L.OUT / "neusight_e2e.json").read_text())
    assert set(doc["calibrations"]) <= set(L.KERNEL_GPUS)
    for dev in L.DEVICES.values():
        path = ROOT / "exported_models" / dev / "manifest.json"
        m = json.loads(path.read_text())
        cal, source = C.calibration_of(dev)
        assert m["calibration"] == cal and m["calibration_source"] == source
        c = doc["calibrations"].get(dev)
        assert (cal is not None) == bool(c and c["mape"] < c["uncalibrated_mape"])
    for dev in ("h100", "l4"):  # the zero-shot check stays uncalibrated
        assert json.loads((ROOT / "exported_models" / dev / "manifest.json").read_text())["calibration"] is None
