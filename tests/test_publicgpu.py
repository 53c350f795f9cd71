"""Published whole-model GPU measurements as records, and their ONNX rebuilds (training/publicgpu)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import onnx
import pytest

pytest.importorskip("torch")
compat = pytest.importorskip("training.zoo.real.torchvision_compat")
compat.importable_torchvision()  # before timm is looked for
pytest.importorskip("timm")

from perfseer_rt import extract  # noqa: E402
from training.campaign.store import Store, dataset_folders, iter_records, on_cpu  # noqa: E402
from training.publicgpu import cli, export_one, exports, families, neusight, timm_csv  # noqa: E402
from training.publicgpu.build import build_neusight, build_timm  # noqa: E402
from training.publicgpu.cache import onnx_file, onnx_name  # noqa: E402
from training.publicgpu.worker import ExportWorker  # noqa: E402
from training.zoo import ModelConfig  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
INFER = "benchmark-infer-amp-nhwc-pt240-cu124-rtx4090.csv"
TRAIN = "benchmark-train-amp-nchw-pt112-cu113-rtx3090.csv"


@pytest.fixture
def timm_dir(tmp_path) -> Path:
    """Two tiny benchmark files in timm's two column orders (rows from the shared copies' formats)."""
    d = tmp_path / "timm"
    d.mkdir()
    (d / INFER).write_text(
        "model,infer_img_size,infer_samples_per_sec,infer_step_time,infer_batch_size,param_count,"
        "infer_gmacs,infer_macts\n"
        "resnet50,224,3000.5,170.6,512,25.56,4.11,11.11\n"
        "vit_huge_patch16_gap_448,448,,,,631.67,544.7,636.83\n"  # no timing: not a record
        "convnext_tiny_in22ft1k,224,2500.0,204.8,512,28.59,4.47,13.44\n")
    (d / TRAIN).write_text(
        "model,train_samples_per_sec,train_step_time,train_batch_size,train_img_size,param_count\n"
        "efficientnet_b0,1200.0,213.3,256,224,5.29\n")
    (d / "notes.txt").write_text("not a benchmark file\n")
    return d


def test_file_names_give_gpu_framework_precision_layout_and_mode():
    f = timm_csv.parse_name(INFER)
    assert (f.mode, f.precision, f.layout, f.torch_version, f.cuda_version, f.gpu_key) == \
        ("inference", "amp-fp16", "nhwc", "2.4", "12.4", "rtx4090")
    f = timm_csv.parse_name(TRAIN)
    assert (f.mode, f.layout, f.torch_version, f.cuda_version) == ("train", "nchw", "1.12", "11.3")
    assert timm_csv.parse_name("benchmark-infer-amp-nchw-pt113-cu117-rtx3090.csv").torch_version == "1.13"
    assert timm_csv.parse_name("benchmark-infer-amp-nchw-pt210-cu121-rtx3090.csv").torch_version == "2.1"


@pytest.mark.parametrize("name", ["benchmark-infer-amp-nchw-pt290-cu128-rtx4090.csv",
                                  "benchmark-infer-amp-dynamo-pt240-cu124-rtx4090.csv",
                                  "benchmark-infer-amp-nchw-pt240-cu124-rtx5090.csv"])
def test_reserved_files_are_refused(name):
    with pytest.raises(timm_csv.BenchmarkFileError, match="reserved"):
        timm_csv.parse_name(name)


def test_unknown_names_are_refused_with_the_expected_pattern():
    with pytest.raises(timm_csv.BenchmarkFileError, match="not a timm benchmark file name"):
        timm_csv.parse_name("results-imagenet.csv")
    with pytest.raises(timm_csv.BenchmarkFileError, match="unknown GPU 'a100'"):
        timm_csv.parse_name("benchmark-infer-amp-nchw-pt240-cu124-a100.csv")


def test_rows_become_records_with_provenance(timm_dir):
    recs = timm_csv.read_file(timm_dir / INFER)
    assert [r["config"]["params"]["model"] for r in recs] == ["resnet50", "convnext_tiny_in22ft1k"]
    r = recs[0]
    assert r["provenance"] == {
        "source": "timm benchmark CSV, measured by the timm maintainers, not us",
        "repository": "huggingface/pytorch-image-models", "licence": "Apache-2.0",
        "file": INFER, "line": 2, "commits": ["5c33776a", "ee5b1e82"]}
    assert r["measured_by"] == "others"
    assert r["env"] == {"gpu_name": "NVIDIA GeForce RTX 4090", "framework": "PyTorch",
                        "torch_version": "2.4", "cuda_version": "12.4"}
    assert (r["setup"]["precision"], r["setup"]["layout"], r["setup"]["mode"]) == ("amp-fp16", "nhwc", "inference")
    assert (r["kind"], r["batch"], r["device"], r["status"]) == ("inference", 512, "rtx4090", "ok")
    assert r["metrics"] == {"latency_ms": 170.6, "samples_per_s": 3000.5}
    assert r["input_shapes"] == {"input": [512, 3, 224, 224]}
    assert r["published"] == {"param_count_m": 25.56, "gmacs": 4.11, "macts_m": 11.11}
    assert (r["group"], r["arch_kind"]) == ("resnet", "cnn")
    # the architecture is the zoo's timm:model=...,res=... (the CPU datasets' timm records)
    assert r["arch_id"] == ModelConfig("timm", {"model": "resnet50", "res": 224}).arch_id
    assert r["onnx"] == "torchscript/resnet50@224.onnx"
    assert not on_cpu(r) and r["target"].startswith("published-")
    renamed = recs[1]
    assert renamed["published"]["renamed_to"] == "convnext_tiny.fb_in22k_ft_in1k"
    assert renamed["group"] == "convnext" and renamed["provenance"]["line"] == 4
    (t,) = timm_csv.read_file(timm_dir / TRAIN)
    assert t["kind"] == "train" and t["metrics"] == {"step_ms": 213.3, "samples_per_s": 1200.0}
    assert t["provenance"]["commits"] == ["c865028c"] and t["env"]["cuda_version"] == "11.3"
    assert "gmacs" not in t["published"] and t["arch_kind"] == "mobile-cnn"


def test_a_file_without_its_columns_is_an_error(tmp_path):
    bad = tmp_path / INFER
    bad.write_text("model,infer_img_size\nresnet50,224\n")
    with pytest.raises(timm_csv.BenchmarkFileError, match="missing column"):
        timm_csv.read_file(bad)


@pytest.mark.parametrize("name,module,kind", [
    ("resnet50", "resnet", "cnn"), ("efficientnet_b0", "efficientnet", "mobile-cnn"),
    ("mobilenetv3_large_100", "mobilenetv3", "mobile-cnn"), ("vit_base_patch16_224", "vision_transformer", "vit"),
    ("mobilevit_s", "mobilevit", "hybrid"), ("mixer_b16_224", "mlp_mixer", "mlp-mixer"),
    ("mobileone_s0", "byobnet", "mobile-cnn"), ("repvgg_a2", "byobnet", "cnn"),
    ("caformer_s18", "metaformer", "hybrid"), ("poolformer_s12", "metaformer", "other"),
    ("convnext_tiny_in22ft1k", "convnext", "cnn"), ("gluon_xception65", "xception_aligned", "mobile-cnn")])
def test_family_and_kind(name, module, kind):
    assert families.timm_module(name) == module
    assert families.arch_kind(module, name) == kind


def test_an_unknown_module_or_model_is_an_error():
    with pytest.raises(families.UnknownFamilyError, match="MODULE_KIND"):
        families.arch_kind("brand_new_module", "brand_new_net")
    with pytest.raises(families.UnknownFamilyError, match="not a timm"):
        families.timm_module("no_such_model_anywhere")


@pytest.mark.skipif(not timm_csv.SHARED.is_dir(), reason="the shared timm copies are not on this machine")
def test_every_shared_model_has_a_family_and_kind():
    names = {r["model"] for f in timm_csv.shared_files() for r in csv.DictReader(f.open())}
    kinds = {families.arch_kind(families.timm_module(n), n) for n in names}
    assert kinds <= set(families.KINDS)


def test_folders_are_campaign_datasets_and_regenerate_identically(timm_dir, tmp_path):
    out = tmp_path / "public-gpu" / "timm"
    counts = build_timm(timm_dir, out)
    assert counts == {"rtx4090/inference-amp-fp16-nhwc-pt2.4": 2, "rtx3090/train-amp-fp16-nchw-pt1.12": 1}
    folders = dataset_folders([tmp_path / "public-gpu"])
    assert len(folders) == 2
    part = out / "rtx4090/inference-amp-fp16-nhwc-pt2.4/records/part-00000.jsonl"
    before = part.read_bytes()
    store = Store(part.parent.parent)  # the campaign engine opens it and counts its configurations
    assert store.count == 2 and store.is_done(ModelConfig("timm", {"model": "resnet50", "res": 224}).arch_id, 512)
    assert json.loads((part.parent.parent / "campaign.json").read_text())["configurations"] == 2
    build_timm(timm_dir, out)
    assert part.read_bytes() == before
    assert len(list(iter_records(part.parent.parent))) == 2


def test_neusight_labels_become_records(tmp_path):
    folder = REPO / "data" / "neusight-e2e"
    recs = neusight.records(folder)
    rows = (folder / "labels.csv").read_text().splitlines()[1:]
    assert len(recs) == len(rows) > 100
    h100 = next(r for r in recs if r["device"] == "h100" and r["kind"] == "train")
    assert h100["env"]["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert h100["provenance"]["repository"] == "sitar-lab/NeuSight"
    assert h100["provenance"]["file"].startswith("scripts/asplos/label/NVIDIA_H100_80GB_HBM3/")
    assert h100["metrics"]["step_ms"] == pytest.approx(h100["published"]["fw_ms"] + h100["published"]["bw_ms"])
    assert h100["setup"]["precision"] == "fp32" and "no optimizer step" in h100["setup"]["step"]
    assert {r["group"] for r in recs} == {"bert", "gpt2", "opt"}
    assert any(r["device"] == "amd-instinct-mi100" for r in recs)
    counts = build_neusight(folder, tmp_path / "n")
    assert sum(counts.values()) == len(recs)


def _records(timm_dir, tmp_path) -> list[dict]:
    build_timm(timm_dir, tmp_path / "data" / "timm")
    return [r for f in dataset_folders([tmp_path / "data"]) for r in iter_records(f)]


def test_queue_goes_round_robin_over_families_with_a_seeded_dynamo_share():
    archs = {(f"{g}_{i}", 224): {"batch": 256, "group": g, "params_m": float(10 - i)}
             for g in ("a", "b", "c") for i in range(10)}
    jobs = exports.queue(archs, share=0.1, seed=1)
    ts = [j for j in jobs if j.exporter == "torchscript"]
    assert len(ts) == 30 and {j.group for j in ts[:3]} == {"a", "b", "c"}
    assert ts[0].params_m == 1.0  # smallest first within a family
    dyn = [i for i, j in enumerate(jobs) if j.exporter == "dynamo"]
    assert len(dyn) == 3 and all(jobs[i - 1].key[:2] == jobs[i].key[:2] for i in dyn)
    assert exports.queue(archs, share=0.1, seed=1) == jobs


class _NoWorker(ExportWorker):
    def run(self, job):
        raise AssertionError(f"a done job was run again: {job}")


def test_export_strip_extract_round_trip_and_resume(timm_dir, tmp_path):
    """One tiny timm model through the real export process; a second run skips it."""
    job = exports.Job("test_resnet", 64, "torchscript", 8, "resnet", 0.47)
    cache, log = tmp_path / "cache", tmp_path / "exports.jsonl"
    (entry,) = list(exports.run([job], cache, log, timeout_s=600))
    assert entry["status"] == "ok", entry.get("reason")
    path = cache / onnx_name("test_resnet", 64)
    assert onnx_file(cache, "test_resnet", 64) == path and entry["file"] == "torchscript/test_resnet@64.onnx"
    proto = onnx.load(str(path), load_external_data=False)
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and [d.dim_value for d in dims[1:]] == [3, 64, 64]
    big = [t for t in proto.graph.initializer if t.HasField("raw_data") and len(t.raw_data) >= 1024]
    assert not big  # structure only: no weight data left
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
    assert not path.with_name(path.name + ".data").exists()
    assert entry["nodes"] == len(proto.graph.node) and entry["ops"]["Conv"] >= 5
    assert entry["opset"] == 17 and len(entry["onnx_sha256"]) == 64
    assert entry["extract"]["status"] == "ok" and entry["extract"]["batch"] == 8
    g = extract(str(path), batch=8)
    assert g.globals["flops_total"] == entry["extract"]["flops"]
    # resumable: the log holds the job, so nothing is run again
    assert list(exports.run([job], cache, log, worker=_NoWorker())) == []
    assert len(exports.read_log(log)) == 1


def test_limits_are_recorded_as_failures_not_hangs(tmp_path):
    """A job past its time limit is killed and logged with the reason; an
    architecture over the parameter limit is skipped without being tried."""
    cache, log = tmp_path / "cache", tmp_path / "exports.jsonl"
    slow = exports.Job("test_resnet", 64, "torchscript", 8, "resnet", 0.47)
    huge = exports.Job("vit_gigantic_patch14_224", 224, "torchscript", 64, "vision_transformer", 1844.44)
    entries = list(exports.run([slow, huge], cache, log, timeout_s=0.5, max_params_m=400))
    assert [e["status"] for e in entries] == ["failed", "skipped"]
    assert entries[0]["reason"].startswith("timeout") and "fallback" not in entries[0]["reason"]
    assert len(entries) == 2  # no dynamo fallback after a timeout
    assert "1844.44 M parameters > 400 M" in entries[1]["reason"]
    assert not list(cache.rglob("*.onnx")) and not list(cache.rglob("*.part"))


def test_status_counts_records_and_exports(timm_dir, tmp_path, capsys):
    _records(timm_dir, tmp_path)
    log = tmp_path / "exports.jsonl"
    ok = {"status": "ok", "seconds": 3.0, "extract": {"status": "ok", "flops": 100.0, "nodes": 10}}
    entries = [{"model": "resnet50", "img_size": 224, "exporter": "torchscript",
                "status": "failed", "reason": "RuntimeError: boom"},
               {"model": "efficientnet_b0", "img_size": 224, "exporter": "torchscript", **ok},
               {"model": "efficientnet_b0", "img_size": 224, "exporter": "dynamo", **ok,
                "extract": {"status": "ok", "flops": 101.0, "nodes": 10}}]
    log.write_text("".join(json.dumps(e) + "\n" for e in entries))
    assert cli.main(["status", "--data", str(tmp_path / "data"), "--log", str(log), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["records"]["source / gpu"] == {
        "huggingface/pytorch-image-models / NVIDIA GeForce RTX 3090": 1,
        "huggingface/pytorch-image-models / NVIDIA GeForce RTX 4090": 2}
    e = doc["exports"]
    assert (e["done"], e["fallbacks"], e["architectures"], e["architectures_usable"]) == (2, 1, 3, 1)
    assert e["reasons"] == {"failed: RuntimeError: boom": 1}
    assert e["exporters"]["pairs"] == 1 and e["exporters"]["flops_ratio_median"] == pytest.approx(1.01)


class _ScriptedWorker(ExportWorker):
    """Answers as scripted: TorchScript fails on ``a`` (an unsupported op) and
    times out on ``c``; every other export works."""

    def __init__(self):
        super().__init__()
        self.ran: list[tuple[str, str]] = []

    def run(self, job):
        self.ran.append((job["model"], job["exporter"]))
        if job["exporter"] == "torchscript" and job["model"] == "a":
            return {"status": "failed", "reason": "SymbolicValueError: Unsupported: ONNX export of Unfold"}
        if job["exporter"] == "torchscript" and job["model"] == "c":
            return {"status": "failed", "reason": "timeout: over 900 s"}
        return {"status": "ok", "extract": {"status": "ok"}}


def test_torchscript_failures_get_a_dynamo_fallback_after_the_queue(tmp_path):
    archs = {(m, 224): {"batch": 64, "group": m, "params_m": 1.0} for m in "abc"}
    jobs = exports.queue(archs, share=0.0)
    w = _ScriptedWorker()
    entries = list(exports.run(jobs, tmp_path / "cache", tmp_path / "log.jsonl", worker=w))
    # a's fallback comes after the whole queue; c timed out: the other exporter would too
    assert w.ran == [("a", "torchscript"), ("b", "torchscript"), ("c", "torchscript"), ("a", "dynamo")]
    assert entries[-1]["fallback"] is True and entries[-1]["file"] == "dynamo/a@224.onnx"
    # a run stopped before the fallbacks does them next time, and nothing else
    log = tmp_path / "log2.jsonl"
    w1 = _ScriptedWorker()
    list(exports.run(jobs, tmp_path / "cache", log, worker=w1, limit=1))
    assert w1.ran == [("a", "torchscript")]
    w2 = _ScriptedWorker()
    list(exports.run(jobs[:1], tmp_path / "cache", log, worker=w2))
    assert w2.ran == [("a", "dynamo")]


def test_lean_exports_give_the_same_graph(tmp_path):
    """All parameters sharing one buffer changes no shape, node or FLOP count."""
    plain = export_one.export("test_resnet", 64, "torchscript", tmp_path / "plain.onnx")
    lean = export_one.export("test_resnet", 64, "torchscript", tmp_path / "lean.onnx", lean=True)
    assert lean["lean"] and not plain["lean"] and lean["params"] == plain["params"]
    a, b = extract(str(tmp_path / "plain.onnx"), batch=3), extract(str(tmp_path / "lean.onnx"), batch=3)
    assert a.globals["flops_total"] == b.globals["flops_total"] and a.num_nodes == b.num_nodes
    ops = {k: v for k, v in plain["ops"].items() if k != "Identity"}  # merged equal initializers
    assert {k: v for k, v in lean["ops"].items() if k != "Identity"} == ops


def test_shared_parameters_keep_shapes_and_ties():
    torch = pytest.importorskip("torch")
    lin = torch.nn.Linear(4, 3)
    model = torch.nn.Sequential(lin, torch.nn.ReLU(), torch.nn.Linear(3, 4))
    model[2].weight = torch.nn.Parameter(torch.zeros(4, 3))
    extra = torch.nn.Module()
    extra.tied = lin.weight  # the same parameter registered twice
    model.add_module("extra", extra)
    shapes = [tuple(p.shape) for p in model.parameters()]
    freed = export_one.share_parameters(model)
    assert [tuple(p.shape) for p in model.parameters()] == shapes and freed == 4 * (12 + 3 + 12 + 4)
    assert model.extra.tied is model[0].weight
    ws = [p.detach().flatten() for p in model.parameters()]
    assert len({w.data_ptr() for w in ws}) == len(ws)
    assert not any(torch.equal(ws[i][:3], ws[j][:3]) for i in range(len(ws)) for j in range(i))


def test_a_skipped_architecture_is_tried_when_a_later_run_allows_it(tmp_path):
    job = exports.Job("big", 224, "torchscript", 64, "g", 500.0)
    log = tmp_path / "log.jsonl"
    (e,) = exports.run([job], tmp_path / "cache", log, max_params_m=400, worker=_NoWorker())
    assert e["status"] == "skipped"
    assert list(exports.run([job], tmp_path / "cache", log, max_params_m=400, worker=_NoWorker())) == []
    w = _ScriptedWorker()
    (e,) = exports.run([job], tmp_path / "cache", log, max_params_m=700, worker=w)
    assert e["status"] == "ok" and w.ran == [("big", "torchscript")]


def test_records_refuses_an_empty_source_and_keeps_what_is_there(timm_dir, tmp_path, capsys):
    out = tmp_path / "public-gpu"
    assert cli.main(["records", "--timm-dir", str(timm_dir), "--out", str(out)]) == 0
    before = sorted(p.relative_to(out) for p in out.rglob("*.jsonl"))
    capsys.readouterr()  # the first run's progress bars
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["records", "--timm-dir", str(empty), "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == f"error: no timm benchmark CSVs in {empty}"
    assert sorted(p.relative_to(out) for p in out.rglob("*.jsonl")) == before


def test_the_exporter_check_finds_one_prediction_for_both_spellings(tmp_path, capsys):
    """One model as the TorchScript exporter writes it (the BatchNorm folded
    into a bias named ``onnx::Conv_<n>``) and as the dynamo exporter does (no
    bias left, the fusion in the node's metadata): the same kernels, so a
    ratio of 1 in every mode and metric."""
    from tests.gpu_models import conv_pair
    from training.publicgpu import exporter_check

    cache = tmp_path / "cache"
    for sub, proto in (("torchscript", conv_pair("onnx::Conv_7", None)),
                       ("dynamo", conv_pair(None, None, ("FuseBatchNormIntoConv", "")))):
        (cache / sub).mkdir(parents=True)
        onnx.save(proto, str(cache / sub / "pair@16.onnx"))
    out = tmp_path / "out"
    assert exporter_check.main(["--cache", str(cache), "--out", str(out), "--batch", "8"]) == 0
    doc = json.loads((out / "exporter_check.json").read_text())
    assert [r["model"] for r in doc["rows"]] == ["pair@16"]
    assert set(doc["summary"]) == {"inference_ms", "train_ms", "inference_mem", "train_mem"}
    assert all(s["median"] == 1.0 and s["n"] == 1 for s in doc["summary"].values())
    assert "| inference latency | 1 | 1.0 |" in (out / "exporter_check.md").read_text()
    # a cache without both spellings of any model is a clear error
    (cache / "dynamo" / "pair@16.onnx").unlink()
    assert exporter_check.main(["--cache", str(cache), "--out", str(out)]) == 2
    assert "holds no architecture from both exporters" in capsys.readouterr().out
