"""Outputs that explain themselves: the shipped CPU predictor's results name
the predictor, the device and the units; the table and --json agree; many
models and batch sizes go in one call."""

import json
import shutil

import pytest
from click.testing import CliRunner

import perfseer_rt
from perfseer_rt.cli import main
from perfseer_rt.cli.predict import render_table
from perfseer_rt.errors import PerfSeerError
from perfseer_rt.predict import registry
from perfseer_rt.predict.many import parse_batches

EXAMPLE = "examples/resnet18.onnx"
DEVICE = "cpu-amd-epyc-1t"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_result_names_predictor_device_and_units():
    [r] = perfseer_rt.predict.predict(EXAMPLE, batch=2, device=DEVICE)
    p = r["predictor"]
    default = registry.predictors()[DEVICE].manifest["seernet"]["default_model"]
    assert p["device"] == DEVICE and p["model"] == default and p["kind"].startswith("SeerNet")
    assert "sha256:" in p["version"]
    assert "1 intra-op thread" in p["description"] and "CPU execution provider" in p["description"]
    configs = registry.predictors()[DEVICE].manifest["training_data"]["configurations"]
    assert f"trained on {configs} measured configurations" in p["provenance"]
    mem = r["metrics"]["peak_mem_mb"]
    assert mem["unit"] == "MiB" and "baseline" in mem["meaning"] and "2**20" in mem["meaning"]
    assert r["metrics"]["latency_ms"]["unit"] == "ms"
    assert r["mode"] == "inference"


def test_folder_and_batches_in_one_call(tmp_path):
    (tmp_path / "sub").mkdir()
    shutil.copy(EXAMPLE, tmp_path / "a.onnx")
    shutil.copy(EXAMPLE, tmp_path / "sub" / "b.onnx")
    (tmp_path / "notes.txt").write_text("not a model")
    res = run("predict", tmp_path, "--batch", "1,8", "--device", DEVICE, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [(d["model"], d["batch"]) for d in doc] == [
        (str(tmp_path / "a.onnx"), 1), (str(tmp_path / "a.onnx"), 8),
        (str(tmp_path / "sub" / "b.onnx"), 1), (str(tmp_path / "sub" / "b.onnx"), 8)]
    # the same model at the same batch: the same prediction, wherever it lies
    assert doc[0]["metrics"] == doc[2]["metrics"]
    # and the same numbers as the one-model API call
    [one] = perfseer_rt.predict.predict(EXAMPLE, batch=8, device=DEVICE)
    assert doc[1]["metrics"]["latency_ms"]["value"] == pytest.approx(
        one["metrics"]["latency_ms"]["value"], rel=1e-6)


def test_table_is_the_json_in_words():
    res = run("predict", EXAMPLE, "--batch", "1,32", "--device", DEVICE)
    assert res.exit_code == 0, res.output
    out = res.stdout
    doc = json.loads(run("predict", EXAMPLE, "--batch", "1,32", "--device", DEVICE,
                         "--json").stdout)
    assert f"predictor  {DEVICE} / seernet" in out and "peak_mem_mb [MiB]" in out
    assert doc[0]["predictor"]["description"] in out
    assert doc[0]["metrics"]["peak_mem_mb"]["meaning"] in out
    for d in doc:
        assert f"{d['metrics']['latency_ms']['value']:.4g}" in out


def test_table_shows_intervals_and_tolerates_missing_keys():
    minimal = [{"model": "m.onnx", "device": "d", "batch": 4,
                "metrics": {"latency_ms": {"value": 12.0, "unit": "ms"}}}]
    assert "m.onnx" in render_table(minimal) and "12" in render_table(minimal)
    with_iv = [{**minimal[0], "metrics": {"latency_ms": {
        "value": 12.0, "unit": "ms", "interval": [10.0, 15.5], "coverage": 0.9}}}]
    text = render_table(with_iv)
    assert "12 [10, 15.5] 90%" in text and "prediction interval" in text


@pytest.mark.parametrize("text", ["0", "a,b", "", "1,-2"])
def test_bad_batch_list(text):
    with pytest.raises(PerfSeerError, match="--batch"):
        parse_batches(text)
    res = run("predict", EXAMPLE, "--batch", text)
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.output


def test_empty_folder_is_bad_input(tmp_path):
    res = run("predict", tmp_path)
    assert res.exit_code == 2 and "holds no .onnx files" in res.stderr
