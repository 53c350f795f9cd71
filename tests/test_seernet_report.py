"""The report command end to end, on a tiny synthetic dataset.

This is a mechanics test only: random-feature graphs with a learnable
synthetic target, a couple of epochs. The numbers it produces say nothing
about accuracy on real hardware data.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import onnx
import pytest

from training.seernet import data
from training.seernet.export import export_checkpoints, run_onnx
from training.seernet.report import main
from training.seernet.sample import concat_graphs
from training.seernet.synthetic import write_synthetic_dataset
from training.seernet.train import load_checkpoint
from training.seernet.user_check import compare, summary


@pytest.mark.slow
def test_report_end_to_end(tmp_path, capsys):
    ds = write_synthetic_dataset(tmp_path / "ds", num_archs=16, batches=(1, 4), max_nodes=12)
    out, exp = tmp_path / "report", tmp_path / "exported"
    models = ["seernet", "seernet_multi", "mlp_node", "pmgns", "eagle", "kernel_additive", "gbm"]
    if importlib.util.find_spec("torch_geometric") is None:  # PMGNS and Eagle need it
        models = [m for m in models if m not in ("pmgns", "eagle")]
    rc = main(["--dataset", str(ds), "--out", str(out), "--epochs", "2", "--threads", "1",
               "--export-dir", str(exp), "--quiet", "--models", *models])
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    for split in ("arch", "family"):
        res = report["splits"][split]
        assert list(res["models"]) == [*models, "seernet_gbm"]  # SeerNet blended with the GBM
        for r in res["models"].values():
            for m in ("latency_ms", "peak_mem_mb"):
                s = r["metrics"][m]
                assert s["count"] == res["sizes"]["test"] and s["mape"] >= 0 and 0 <= s["within_10"] <= 100
        assert (out / "plots" / f"{split}_latency_ms.png").stat().st_size > 1000
    assert report["splits"]["family"]["test_families"] == ["fam0"]
    md = (out / "report.md").read_text()
    assert "| SeerNet |" in md and "Family-held-out split" in md and "plots/arch_peak_mem_mb.png" in md
    assert "mean MAPE" in capsys.readouterr().out

    # checkpoints rebuild the model with their normalization
    model, norm, metrics, ckpt = load_checkpoint(out / "checkpoints" / "arch" / "seernet_multi.pt")
    assert metrics == ["latency_ms", "peak_mem_mb"] and ckpt["config"]["num_outputs"] == 2

    # exported predictors answer in metric units and agree with the report's SeerNet
    manifest = json.loads((exp / "manifest.json").read_text())
    assert [m["file"] for m in manifest["seernet"]["models"]] == ["seernet.onnx", "seernet_multi.onnx",
                                                                 "seernet_gbm.onnx"]
    assert manifest["accuracy"]["arch"]["seernet"]["latency_ms"]["mape"] == \
        report["splits"]["arch"]["models"]["seernet"]["metrics"]["latency_ms"]["mape"]
    samples = data.load_samples(ds)
    test = data.split_samples(samples, "arch")["test"]
    a = concat_graphs([s.x for s in test], [s.edge_index for s in test], [s.edge_attr for s in test],
                      [s.u for s in test])
    y = run_onnx(exp / "seernet.onnx", **a)
    assert y.shape == (len(test), 2) and (y > 0).all()
    true = np.array([[s.targets["latency_ms"], s.targets["peak_mem_mb"]] for s in test])
    mape = float(np.mean(np.abs(y - true) / true, axis=0)[0] * 100)
    assert abs(mape - manifest["accuracy"]["arch"]["seernet"]["latency_ms"]["mape"]) < 1e-2
    assert onnx.load(exp / "seernet.onnx").graph.output[0].name == "y"

    # the same file again from the checkpoints
    ckpts = [out / "checkpoints" / "arch" / f"seernet__{m}.pt" for m in ("latency_ms", "peak_mem_mb")]
    again = export_checkpoints(ckpts, tmp_path / "again.onnx")
    np.testing.assert_allclose(run_onnx(again, **a), y, rtol=1e-5)

    # the blend ships as one file that reproduces the report's blended scores
    blend = report["splits"]["arch"]["models"]["seernet_gbm"]
    yb = run_onnx(exp / "seernet_gbm.onnx", **a)
    for j, m in enumerate(("latency_ms", "peak_mem_mb")):
        mape = float(np.mean(np.abs(yb[:, j] - true[:, j]) / true[:, j]) * 100)
        assert abs(mape - blend["metrics"][m]["mape"]) < 1e-2
    # its second output is the two models' gap, log(SeerNet) - log(GBM): log y = log SeerNet - (1 - w) gap
    gap = run_onnx(exp / "seernet_gbm.onnx", **a, output="gap")
    w = np.array([blend["weights"][m] for m in ("latency_ms", "peak_mem_mb")])
    np.testing.assert_allclose(np.log(y) - np.log(yb), (1 - w) * gap, atol=2e-4)
    dis = manifest["seernet"]["uncertainty"]["disagreement"]
    assert (dis is not None) == (manifest["seernet"]["default_model"] == "seernet_gbm")


@pytest.mark.slow  # trains the report's models end to end (~17 s on the loaded 2-core machine)
def test_report_resume(tmp_path, capsys):
    """Splits trained by separate runs merge into one report with --resume;
    a checkpoint trained with other settings is retrained, not reused."""
    ds = write_synthetic_dataset(tmp_path / "ds", num_archs=12, batches=(1,), max_nodes=8)
    out = tmp_path / "report"
    common = ["--dataset", str(ds), "--out", str(out), "--threads", "1", "--models", "seernet_multi", "gbm"]
    assert main([*common, "--epochs", "2", "--splits", "arch"]) == 0
    assert main([*common, "--epochs", "2", "--splits", "family"]) == 0
    capsys.readouterr()
    assert main([*common, "--epochs", "2", "--resume"]) == 0
    err = capsys.readouterr().err
    assert err.count("resumed from") == 2
    report = json.loads((out / "report.json").read_text())
    assert set(report["splits"]) == {"arch", "family", "real"}
    assert "skipped" in report["splits"]["real"]  # synthetic families hold no published architectures
    assert report["splits"]["arch"]["models"]["seernet_multi"]["runs"]["latency_ms+peak_mem_mb"]["pcgrad"] is True
    assert main([*common, "--epochs", "3", "--resume", "--splits", "arch"]) == 0
    assert "resumed from" not in capsys.readouterr().err


@pytest.mark.slow  # trains the shipped split twice (~15 s on the loaded 2-core machine)
def test_ship_all_refits_on_the_test_graphs_and_keeps_the_split_calibration(tmp_path):
    """--ship-all ships the shipped split's models trained again on its
    train and test graphs; the accuracy, intervals and warning threshold in
    the manifest stay the split's (measured on graphs its models never saw)."""
    ds = write_synthetic_dataset(tmp_path / "ds", num_archs=16, batches=(1, 4), max_nodes=10)
    common = ["--dataset", str(ds), "--epochs", "2", "--threads", "1", "--quiet", "--models", "seernet", "gbm",
              "--splits", "arch"]
    assert main([*common, "--out", str(tmp_path / "r1"), "--export-dir", str(tmp_path / "e1")]) == 0
    assert main([*common, "--out", str(tmp_path / "r2"), "--export-dir", str(tmp_path / "e2"),
                 "--ship-all"]) == 0
    r1, r2 = (json.loads((tmp_path / r / "report.json").read_text()) for r in ("r1", "r2"))
    sizes = r2["splits"]["arch"]["sizes"]
    assert r2["refit_on_all"]["sizes"]["train"] == sizes["train"] + sizes["test"]
    m1, m2 = (json.loads((tmp_path / e / "manifest.json").read_text()) for e in ("e1", "e2"))
    assert m1["provenance"]["notes"]["trained_on_split"] == "arch"
    assert m2["provenance"]["notes"]["trained_on_split"] == "arch+all"
    assert m2["accuracy"] == m1["accuracy"]
    assert m2["seernet"]["uncertainty"] == m1["seernet"]["uncertainty"]
    assert (tmp_path / "r2" / "checkpoints" / "all").is_dir()
    test = data.split_samples(data.load_samples(ds), "arch")["test"]
    a = concat_graphs([s.x for s in test], [s.edge_index for s in test], [s.edge_attr for s in test],
                      [s.u for s in test])
    assert not np.allclose(run_onnx(tmp_path / "e1" / "seernet_gbm.onnx", **a),
                           run_onnx(tmp_path / "e2" / "seernet_gbm.onnx", **a))


def test_per_batch_scores_split_the_test_set_by_batch():
    from training.seernet.report import per_batch_scores

    true = np.array([[10.0], [10.0], [20.0], [40.0]])
    pred = np.array([[11.0], [9.0], [20.0], [20.0]])
    out = per_batch_scores(pred, true, [1, 1, 2, 8], ["step_ms"])
    assert list(out) == ["1", "2", "8"]
    assert out["1"]["step_ms"]["mape"] == pytest.approx(10.0) and out["1"]["step_ms"]["count"] == 2
    assert out["2"]["step_ms"]["mape"] == pytest.approx(0.0)
    assert out["8"]["step_ms"]["mape"] == pytest.approx(50.0)


def _train_record(**over):
    rec = {"status": "ok", "kind": "train", "device": "cpu-x-1t-torch", "env": {"cpu_model": "X CPU"},
           "provider": {"threads": 1}, "quality": {"optimizer": "sgd", "peak_mem_method": "vmhwm"}}
    rec.update(over)
    return rec


def test_the_export_says_which_training_step_its_labels_timed():
    from training.seernet.report_export import mode_and_step

    assert mode_and_step([{"status": "ok", "metrics": {}}]) == ("inference", None)
    mode, step = mode_and_step([_train_record(), _train_record()])
    assert mode == "train" and step["engine"] == "torch" and step["threads"] == 1
    assert step["peak_mem_method"] == "vmhwm" and step["dataset_device"] == "cpu-x-1t-torch"
    assert "SGD (momentum 0.9, lr 0.001)" in step["definition"] and "X CPU" in step["definition"]
    with pytest.raises(data.DatasetError, match="inference and training steps do not train one"):
        mode_and_step([_train_record(), {"status": "ok", "kind": "inference"}])
    with pytest.raises(data.DatasetError, match="more than one optimizer"):
        mode_and_step([_train_record(), _train_record(quality={"optimizer": "adam"})])
    with pytest.raises(data.DatasetError, match="more than one method"):
        mode_and_step([_train_record(),
                        _train_record(quality={"optimizer": "sgd", "peak_mem_method": "vmhwm+mmap64k"})])


def test_user_check_scores_signed_errors_and_interval_coverage():
    pred = {"metrics": {"latency_ms": {"value": 11.0, "interval": [9.0, 12.0]},
                        "peak_mem_mb": {"value": 50.0, "interval": [45.0, 55.0]}},
            "warnings": ["far from the training data (distance score 0.30 > 0.17): ..."]}
    pred["metrics"]["peak_mem_mb"]["disagreement"] = -0.4
    a = compare({"latency_ms": 10.0, "peak_mem_mb": 100.0}, pred)
    assert a["latency_ms"]["error_pct"] == pytest.approx(10.0) and a["latency_ms"]["inside_interval"]
    assert a["peak_mem_mb"]["error_pct"] == pytest.approx(-50.0) and not a["peak_mem_mb"]["inside_interval"]
    assert a["ood_warning"] and not a["disagreement_warning"]
    assert a["peak_mem_mb"]["gap"] == -0.4 and a["latency_ms"]["gap"] is None
    b = compare({"latency_ms": 11.0, "peak_mem_mb": 50.0},
                {**pred, "warnings": ["the two models of the predictor disagree on peak_mem_mb by 49 % ..."]})
    assert b["disagreement_warning"] and not b["ood_warning"]
    s = summary([a, b])
    assert s["ood_warning"] == 1 and s["disagreement_warning"] == 1
    assert s["pairs"] == 2 and s["latency_ms"]["mape"] == pytest.approx(5.0)
    assert s["peak_mem_mb"]["coverage"] == pytest.approx(50.0)
    assert s["peak_mem_mb"]["median_error"] == pytest.approx(-25.0)
