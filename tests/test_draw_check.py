"""An untuned check's draw leaves out every model the predictor may have
seen, and is the same for the same seed; the re-extraction picks the
architectures whose stored weights moved with the batch; a user check
records unexportable models and the speed of its measuring core."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from training.dataset.reextract import WEIGHT, varying_weights
from training.seernet.draw_check import check_models, dataset_models, draw
from training.seernet.recalibrate import model_name
from training.zoo.real import hf_text


def test_draw_excludes_data_and_checks_and_repeats_by_seed(tmp_path):
    (tmp_path / "ds" / "records").mkdir(parents=True)
    recs = [{"spec": f"timm:model={m},res=224"} for m in ("resnet50", "vit_small_patch16_224")]
    recs += [{"spec": "hf:model=gpt2,seq=64"}, {"spec": "resnet:depth=18,width=1.0,res=224"}]
    (tmp_path / "ds" / "records" / "part-0.jsonl").write_text("\n".join(map(json.dumps, recs)) + "\n")
    check = tmp_path / "user_check_x.json"
    check.write_text(json.dumps({"rows": [{"spec": "timm:model=efficientnet_b0,res=224"}],
                                 "specs": ["hf:model=bert-base,seq=64"]}))
    seen = dataset_models([tmp_path / "ds"]) | check_models([check])
    assert seen == {"timm:model=resnet50", "timm:model=vit_small_patch16_224", "hf:model=gpt2",
                    "timm:model=efficientnet_b0", "hf:model=bert-base"}
    timm, hf = draw(3, 40, seen, seen)
    assert len(timm) == 40 and timm == draw(3, 40, seen, seen)[0] and timm != draw(4, 40, seen, seen)[0]
    drawn = {model_name(s) for s in timm + hf}
    assert not drawn & seen
    assert {m for m in drawn if m.startswith("hf:")} == \
        {f"hf:model={n}" for n in hf_text.ARCHITECTURES} - {"hf:model=gpt2", "hf:model=bert-base"}


def test_varying_weights_finds_batch_dependent_weights():
    def graph(weight):
        u = np.zeros(WEIGHT + 1, np.float32)
        u[WEIGHT] = weight
        return (None, None, None, u)
    graphs = {"a/b1": graph(100.0), "a/b8": graph(100.5), "b/b1": graph(100.0), "b/b8": graph(180.0)}
    records = [{"arch_id": k.split("/")[0], "graph_key": k} for k in graphs]
    assert varying_weights(graphs, records) == ["b"]


def test_user_check_records_a_model_torch_cannot_export_and_measures_nothing(tmp_path, monkeypatch):
    from training.seernet import user_check

    def no_export(cfg, path, **kw):
        raise RuntimeError("Exporting the operator 'aten::rms_norm' to ONNX opset version 18 is not supported")

    def no_cli(*args, **kw):
        raise AssertionError("nothing may be measured or predicted for a model without an export")

    monkeypatch.setattr(user_check, "export_onnx", no_export)
    monkeypatch.setattr(user_check, "_cli", no_cli)
    out = tmp_path / "check.json"
    spec = "timm:model=resnet18,res=224"
    args = ["--out", str(out), "--work", str(tmp_path / "w"), "--batches", "1", "4", "--specs", spec]
    assert user_check.main(args) == 0
    doc = json.loads(out.read_text())
    assert doc["rows"] == [] and [f["spec"] for f in doc["not_exportable"]] == [spec]
    assert "rms_norm" in doc["not_exportable"][0]["error"]
    assert user_check.main(args) == 0  # a rerun skips it: still listed once, nothing measured
    assert len(json.loads(out.read_text())["not_exportable"]) == 1


def test_user_check_rows_keep_a_speed_probe_taken_on_the_measuring_core(tmp_path, monkeypatch):
    from training.seernet import user_check

    core = min(os.sched_getaffinity(0))
    affinity = os.sched_getaffinity(0)
    seen = []

    def probe():
        seen.append(os.sched_getaffinity(0))
        return 0.5 + len(seen)  # 1.5 before, 2.5 after: the row keeps their mean

    def cli(args, core=None):
        if args[0] == "profile":
            return {"metrics": {"latency_ms": 10.0, "peak_mem_mb": 50.0}}
        return {"metrics": {"latency_ms": {"value": 11.0}, "peak_mem_mb": {"value": 45.0}}}

    monkeypatch.setattr(user_check, "export_onnx", lambda cfg, path, **kw: Path(path).write_bytes(b""))
    monkeypatch.setattr(user_check, "_cli", cli)
    monkeypatch.setattr(user_check, "speed_probe", probe)
    out = tmp_path / "check.json"
    args = ["--out", str(out), "--work", str(tmp_path / "w"), "--core", str(core), "--batches", "1",
            "--specs", "timm:model=resnet18,res=224"]
    assert user_check.main(args) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert row["speed_probe_ms"] == 2.0 and seen == [{core}, {core}]
    assert os.sched_getaffinity(0) == affinity  # the caller's affinity is back
    assert abs(row["latency_ms"]["error_pct"] - 10.0) < 1e-9 and abs(row["peak_mem_mb"]["error_pct"] + 10.0) < 1e-9


def test_exporter_check_pairs_rows_by_model_and_batch():
    """The report pairs the two exporters' rows of one (spec, batch) and
    lists models only one exporter measured."""
    from training.seernet.exporter_check import paired, report

    def row(spec, batch, lat, mem, pred_mem):
        return {"spec": spec, "batch": batch,
                "latency_ms": {"measured": lat, "predicted": lat, "error_pct": 0.0, "inside_interval": True},
                "peak_mem_mb": {"measured": mem, "predicted": pred_mem,
                                "error_pct": (pred_mem / mem - 1) * 100, "inside_interval": True}}

    ts = {"rows": [row("timm:model=a,res=224", 1, 10.0, 100.0, 90.0),
                   row("timm:model=b,res=224", 1, 5.0, 50.0, 50.0)]}
    dyn = {"rows": [row("timm:model=a,res=224", 1, 10.0, 160.0, 90.0)],
           "not_exportable": [{"spec": "timm:model=b,res=224", "error": "x"}]}
    assert [(a["spec"], b["peak_mem_mb"]["measured"]) for a, b in paired(ts, dyn)] == \
        [("timm:model=a,res=224", 160.0)]
    text = report(ts, dyn, ["ts.json", "dyn.json"])
    assert "| a | 1 | 10.0 / 10.0 (1.00) | 100.0 / 160.0 (1.60) |" in text
    assert "not exportable: timm:model=b,res=224" in text
