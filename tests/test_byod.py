"""Bring-your-own-device: CSV checks, the train command end to end.

The end-to-end test trains for two epochs on eight NAS-Bench-201 networks
whose latencies are real measurements (copied from the HELP CSV, Xeon Gold
6240, batch 1); it checks mechanics and the exported contract, not accuracy.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from training.byod.cli import main  # noqa: E402
from training.byod.errors import ByodError  # noqa: E402
from training.byod.memory_k import MIN_ACT_MIB, run_phase_k, spread  # noqa: E402
from training.byod.table import parse_rows, read_csv  # noqa: E402

# (cell, gold_6240_ms) of HELP's NAS-Bench-201 architectures 0..7
CELLS = [
    ("|avg_pool_3x3~0|+|nor_conv_1x1~0|skip_connect~1|+|nor_conv_1x1~0|skip_connect~1|skip_connect~2|", 6.6145),
    ("|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|", 14.4807),
    ("|avg_pool_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|avg_pool_3x3~0|avg_pool_3x3~1|avg_pool_3x3~2|", 11.6785),
    ("|avg_pool_3x3~0|+|skip_connect~0|none~1|+|none~0|none~1|skip_connect~2|", 4.0239),
    ("|skip_connect~0|+|skip_connect~0|nor_conv_1x1~1|+|skip_connect~0|skip_connect~1|nor_conv_1x1~2|", 5.8124),
    ("|nor_conv_1x1~0|+|skip_connect~0|nor_conv_1x1~1|+|nor_conv_3x3~0|none~1|avg_pool_3x3~2|", 10.1876),
    ("|nor_conv_3x3~0|+|none~0|none~1|+|avg_pool_3x3~0|nor_conv_3x3~1|nor_conv_3x3~2|", 13.6581),
    ("|none~0|+|skip_connect~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|nor_conv_3x3~2|", 10.5241),
]


def write(path, text):
    path.write_text(text)
    return path


def good_csv(tmp_path):
    lines = ["model,batch,latency_ms,note"] + [f"nb201:{c},1,{v},x" for c, v in CELLS[:3]]
    return write(tmp_path / "m.csv", "\n".join(lines) + "\n")


def run_cli(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


# ------------------------------------------------------------------- CSV
def test_read_csv_parses_models_batches_metrics(tmp_path):
    m = read_csv(good_csv(tmp_path), "model", ["latency_ms"], batch_column="batch")
    assert len(m) == 3 and m.batches == [1, 1, 1]
    assert m.metrics["latency_ms"] == pytest.approx([6.6145, 14.4807, 11.6785])
    assert m.models[0].startswith("nb201:|avg_pool_3x3~0|")
    fixed = read_csv(good_csv(tmp_path), "model", ["latency_ms"], batch=8)
    assert fixed.batches == [8, 8, 8]


def test_empty_metric_cell_is_missing_not_an_error(tmp_path):
    p = write(tmp_path / "e.csv", f"model,latency_ms\nnb201:{CELLS[0][0]},\nnb201:{CELLS[1][0]},3.5\n")
    m = read_csv(p, "model", ["latency_ms"])
    assert np.isnan(m.metrics["latency_ms"][0]) and m.metrics["latency_ms"][1] == 3.5


@pytest.mark.parametrize("text, args, needle", [
    ("model,latency_ms\nnb201:x,1\n", ["--metric", "energy_mj"], "missing column 'energy_mj'"),
    ("name,latency_ms\nnb201:x,1\n", ["--metric", "latency_ms"], "missing column 'model'"),
    (f"model,latency_ms\nnb201:{CELLS[0][0]},1.5\nnb201:{CELLS[1][0]},fast\n", ["--metric", "latency_ms"],
     "row 2 (line 3), column 'latency_ms': 'fast' is not a number"),
    (f"model,latency_ms\nnb201:{CELLS[0][0]},-1\n", ["--metric", "latency_ms"],
     "row 1 (line 2), column 'latency_ms': '-1' is not a positive"),
    (f"model,b,latency_ms\nnb201:{CELLS[0][0]},1,2\nnb201:{CELLS[1][0]},two,2\n",
     ["--metric", "latency_ms", "--batch-column", "b"], "row 2 (line 3), column 'b': 'two' is not a batch size"),
    (f"model,latency_ms\nnb201:{CELLS[0][0]},1.5\nnb201:|bogus_op~0|+|x|,2\n", ["--metric", "latency_ms"],
     "row 2 (line 3), column 'model': unknown model spec"),
    (f"model,latency_ms\nnb201:{CELLS[0][0]},1.5\nnotafamily:depth=3,2\n", ["--metric", "latency_ms"],
     "row 2 (line 3), column 'model'"),
    (f"model,latency_ms\nnb201:{CELLS[0][0]},1.5\nnets/missing.onnx,2\n", ["--metric", "latency_ms"],
     "row 2 (line 3), column 'model': no ONNX file"),
    ("model,latency\nnb201:x,1\n", ["--metric", "latency"], "has no unit suffix"),
    (f"model,latency_ms\nnb201:{CELLS[0][0]},1.5,7\n", ["--metric", "latency_ms"], "row 1 (line 2) has 3 fields"),
])
def test_malformed_csv_is_one_line_exit_2(tmp_path, capsys, text, args, needle):
    p = write(tmp_path / "bad.csv", text)
    code, out, err = run_cli(["train", "--csv", str(p), "--model-column", "model", "--device", "dev",
                              "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
                              "--quiet", *args], capsys)
    assert code == 2
    assert err.startswith("byod: error: ") and needle in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_parse_rows():
    assert parse_rows("1-3,5", 10) == [0, 1, 2, 4]
    assert parse_rows(" 2 , 2-3 ", 10) == [1, 2]
    for bad, needle in (("0-3", "count from 1"), ("3-1", "low-high"), ("1-11", "past the last"),
                        ("a-b", "bad part"), (",", "selects no rows")):
        with pytest.raises(ByodError, match=needle):
            parse_rows(bad, 10)


# ------------------------------------------------------------- end to end
@pytest.mark.slow
def test_train_command_end_to_end(tmp_path, capsys, monkeypatch):
    from training.zoo import export_onnx, parse_spec

    # one row names an ONNX file (relative to the CSV), the others zoo specs
    (tmp_path / "nets").mkdir()
    export_onnx(parse_spec("nb201:" + CELLS[7][0]), tmp_path / "nets" / "a7.onnx")
    rows = [f"nb201:{c},{v}" for c, v in CELLS[:7]] + [f"nets/a7.onnx,{CELLS[7][1]}"]
    csv_path = write(tmp_path / "gold.csv", "model,latency_ms\n" + "\n".join(rows) + "\n")
    out = tmp_path / "exported_models" / "xeon-gold-6240"
    args = ["train", "--csv", str(csv_path), "--model-column", "model", "--metric", "latency_ms",
            "--device", "xeon-gold-6240", "--train-rows", "1-6", "--test-rows", "7-8", "--out", str(out),
            "--epochs", "2", "--cache", str(tmp_path / "cache"), "--quiet", "--json"]
    code, stdout, err = run_cli(args, capsys)
    assert code == 0, err
    res = json.loads(stdout)
    assert res["accuracy"]["latency_ms"]["count"] == 2
    assert {p.name for p in out.iterdir()} >= {"seernet.onnx", "manifest.json", "report.md"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["device"]["name"] == "xeon-gold-6240"
    assert manifest["metrics"] == [{"name": "latency_ms", "unit": "ms"}]
    assert manifest["training_data"]["notes"]["train_rows"] == 6
    assert manifest["accuracy"]["test"]["seernet"]["latency_ms"]["count"] == 2

    # the runtime's registry finds it and predicts in ms
    from perfseer_rt.predict import api, registry, seernet_run

    monkeypatch.setattr(registry, "models_root", lambda: tmp_path / "exported_models")
    registry.predictors.cache_clear()
    seernet_run._session.cache_clear()
    try:
        got = api.predict(str(tmp_path / "nets" / "a7.onnx"), device="xeon-gold-6240")
    finally:
        registry.predictors.cache_clear()
        seernet_run._session.cache_clear()
    value = got[0]["metrics"]["latency_ms"]
    assert value["unit"] == "ms" and np.isfinite(value["value"]) and value["value"] > 0

    # a second run reuses the cached graphs: no zoo export
    from training.byod.graphs import GraphCache
    from training.byod.train_csv import train_from_csv
    from training.seernet.train import TrainConfig

    cache = GraphCache(tmp_path / "cache")
    train_from_csv(csv_path, "model", ["latency_ms"], "again", train_rows="1-6", out=tmp_path / "again",
                   cfg=TrainConfig(epochs=1, progress=False), cache=cache)
    assert cache.exports == 0 and cache.extracts == 0


def test_bad_device_name_and_overlapping_rows(tmp_path, capsys):
    p = good_csv(tmp_path)
    base = ["train", "--csv", str(p), "--model-column", "model", "--metric", "latency_ms",
            "--cache", str(tmp_path / "cache"), "--quiet"]
    code, _, err = run_cli(base + ["--device", "my device"], capsys)
    assert code == 2 and "bad device name" in err
    code, _, err = run_cli(base + ["--device", "d", "--train-rows", "1-2", "--test-rows", "2-3"], capsys)
    assert code == 2 and "row 2 is in both" in err


def test_nb201_eager_keeps_what_pytorch_runs(tmp_path):
    """The zoo's export drops a dead convolution and the `none` edges; the
    eager graph keeps both (what NAS-Bench-201's PyTorch cell executes)."""
    from collections import Counter

    from training.byod.graphs import GraphCache, resolve

    cell = "|nor_conv_3x3~0|+|skip_connect~0|none~1|+|none~0|none~1|skip_connect~2|"
    cache = GraphCache(tmp_path / "cache")
    zoo = Counter(cache.get(resolve("nb201:" + cell, tmp_path), 1).node_ops)
    eager = Counter(cache.get(resolve("nb201-eager:" + cell, tmp_path), 1).node_ops)
    # stem 1 + two reduction blocks x 3 convs = 7; the dead conv adds one per cell (15 cells)
    assert zoo["Conv"] == 7 and eager["Conv"] == 7 + 15
    assert zoo["Mul"] == 0 and eager["Mul"] >= 15
    assert resolve("nb201-eager:" + cell, tmp_path).arch_id != resolve("nb201:" + cell, tmp_path).arch_id


def test_model_format_needs_one_placeholder(tmp_path, capsys):
    p = write(tmp_path / "cells.csv", "cell,latency_ms\n" + "\n".join(f"{c},{v}" for c, v in CELLS[:3]) + "\n")
    code, _, err = run_cli(["train", "--csv", str(p), "--model-column", "cell", "--metric", "latency_ms",
                            "--device", "d", "--model-format", "nb201", "--cache", str(tmp_path / "c"),
                            "--quiet"], capsys)
    assert code == 2 and "must contain '{}'" in err


# ------------------------------------------------------------- calibrate
# HELP architectures 8 and 9 on the Xeon Gold 6240 (with CELLS: ten real measurements)
MORE_CELLS = [("|nor_conv_1x1~0|+|avg_pool_3x3~0|skip_connect~1|+|skip_connect~0|none~1|nor_conv_3x3~2|", 8.9020),
              ("|avg_pool_3x3~0|+|none~0|none~1|+|skip_connect~0|none~1|nor_conv_3x3~2|", 7.5514)]


@pytest.mark.slow
def test_calibrate_csv_writes_an_entry_predict_uses(tmp_path, capsys, monkeypatch):
    """Ten NB201 networks measured on a Xeon Gold 6240 correct the EPYC
    predictor; the entry predicts the base value through the fitted line."""
    from perfseer_rt.predict import api

    monkeypatch.setenv("PERFSEER_RT_HOME", str(tmp_path / "home"))
    cells = CELLS + MORE_CELLS
    p = write(tmp_path / "gold.csv", "cell,latency_ms\n" + "\n".join(f"{c},{v}" for c, v in cells) + "\n")
    args = ["calibrate", "--csv", str(p), "--model-column", "cell", "--model-format", "nb201:{}",
            "--metric", "latency_ms", "--device", "gold", "--cache", str(tmp_path / "c"), "--json"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    doc = json.loads(out)
    c = doc["corrections"]["latency_ms"]
    assert c["count"] == 10 and np.isfinite(c["cv_mape"]) and doc["folder"] == str(tmp_path / "home/devices/gold")
    [base] = api.predict(_nb201_onnx(tmp_path, CELLS[0][0]), device="cpu-amd-epyc-1t")
    [mine] = api.predict(_nb201_onnx(tmp_path, CELLS[0][0]), device="gold")
    assert mine["metrics"]["latency_ms"]["value"] == pytest.approx(
        np.exp(c["a"]) * base["metrics"]["latency_ms"]["value"] ** c["b"], rel=1e-5)
    # an entry of that name exists now: refused without --force
    code, _, err = run_cli(args, capsys)
    assert code == 2 and "pass --force" in err


def _nb201_onnx(tmp_path, cell):
    from training.zoo import parse_spec
    from training.zoo.export import export_onnx

    path = tmp_path / "nb.onnx"
    if not path.exists():
        export_onnx(parse_spec("nb201:" + cell), path, structure_only=True)
    return path


def test_calibrate_csv_refusals(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PERFSEER_RT_HOME", str(tmp_path / "home"))
    few = write(tmp_path / "few.csv", "cell,latency_ms\n" + "\n".join(f"{c},{v}" for c, v in CELLS[:4]) + "\n")
    base = ["calibrate", "--csv", str(few), "--model-column", "cell", "--model-format", "nb201:{}",
            "--cache", str(tmp_path / "c")]
    for extra, needle in ((["--metric", "latency_ms", "--device", "d"],
                           "4 measured rows; calibration needs at least 10"),
                          (["--metric", "energy_mj", "--device", "d"], "cannot calibrate energy_mj"),
                          (["--metric", "latency_ms", "--device", "cpu-amd-epyc-1t"], "is a shipped device"),
                          (["--metric", "latency_ms", "--device", "d", "--base", "nosuch"], "unknown device 'nosuch'")):
        code, _, err = run_cli(base + extra, capsys)
        assert code == 2 and needle in err, err
    assert not (tmp_path / "home").exists()


def test_bare_cell_hint_shows_the_model_format_syntax(tmp_path, capsys):
    p = write(tmp_path / "cells.csv", "cell,latency_ms\n" + "\n".join(f"{c},{v}" for c, v in CELLS[:3]) + "\n")
    code, _, err = run_cli(["train", "--csv", str(p), "--model-column", "cell", "--metric", "latency_ms",
                            "--device", "d", "--cache", str(tmp_path / "c"), "--quiet"], capsys)
    assert code == 2 and "--model-format 'nb201:{}'" in err


def test_run_phase_k_is_the_run_phase_over_the_live_activations():
    assert run_phase_k(100.0, 160.0, 30.0) == pytest.approx(2.0)
    assert run_phase_k(100.0, 160.0, MIN_ACT_MIB / 2) is None  # the arena's fixed cost, not a multiple
    s = spread({"a": [2.0, 2.0, 2.0], "b": [1.0, 3.0], "c": [5.0]})  # c: one batch size, no spread
    assert s["architectures"] == 2 and s["cv_median"] == pytest.approx(0.25)
    assert spread({"c": [5.0]}) == {"architectures": 0}
