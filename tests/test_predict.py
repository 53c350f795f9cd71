"""The runtime predictor path: registry, batched ONNX prediction, MIG, errors.

The predictor here is an UNTRAINED SeerNet exported to a temporary
exported_models folder: these tests check mechanics (contract, batching,
units, MIG rule, warnings, errors), not accuracy; accuracy is in the
committed reports.
"""

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper

torch = pytest.importorskip("torch")

from perfseer_rt import extract  # noqa: E402
from perfseer_rt.cli import main  # noqa: E402
from perfseer_rt.errors import DeviceError, MetricError, PerfSeerError  # noqa: E402
from perfseer_rt.predict import api, mig, registry, seernet_run  # noqa: E402
from tests.onnx_builders import const, model  # noqa: E402
from tests.test_extract import conv_chain  # noqa: E402

METRICS = ["latency_ms", "peak_mem_mb"]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    from training.seernet import Normalization, from_perfgraph
    from training.seernet.export import export_seernet
    from training.seernet.manifest import model_entry, write_manifest
    from training.seernet.models import build, default_config

    root = tmp_path_factory.mktemp("exported_models")
    graphs = [extract(conv_chain(), batch=b) for b in (1, 2, 4, 8)]
    graphs.append(extract("examples/resnet18.onnx", batch=2))
    # targets only give the normalization a scale; the model is not trained
    samples = [from_perfgraph(g, {"latency_ms": 1.0 + i, "peak_mem_mb": 100.0 * (i + 1)})
               for i, g in enumerate(graphs)]
    norm = Normalization.fit(samples, METRICS)
    torch.manual_seed(0)
    model = build("seernet_multi", default_config("seernet_multi", METRICS, norm, samples)).eval()
    folder = root / "testgpu"
    export_seernet(model, norm, folder / "seernet_multi.onnx", metrics=METRICS)
    write_manifest(folder / "manifest.json", device="testgpu", description="test only",
                   metrics=METRICS, normalization=norm,
                   models=[model_entry(folder / "seernet_multi.onnx", "seernet_multi", METRICS, 1)],
                   training_data={"configurations": 4, "architectures": 2, "families": {"test": 4},
                                  "flops_total": {"min": 1e3, "max": 1e12}, "metrics": {},
                                  "nodes": {"min": 1, "max": 500}, "batch_sizes": [1, 2, 4, 8]},
                   accuracy={"arch": {"seernet_multi": {"peak_mem_mb": {"mape": 7.5, "count": 10}}}},
                   mig_gpu="h100-80gb")
    return root


@pytest.fixture()
def shipped(models_dir, monkeypatch):
    monkeypatch.setattr(registry, "models_root", lambda: models_dir)
    registry.predictors.cache_clear()
    seernet_run._session.cache_clear()
    yield
    registry.predictors.cache_clear()


def test_predict_contract(shipped, tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(conv_chain(), p)
    [r] = api.predict(p, batch=4)
    assert r["device"] == "testgpu" and r["batch"] == 4 and r["model"] == str(p)
    assert set(r["metrics"]) == set(METRICS)
    assert r["metrics"]["latency_ms"]["unit"] == "ms" and r["metrics"]["peak_mem_mb"]["unit"] == "MiB"  # the manifest says "MB"; the profiler measures MiB  # noqa: E501 (a command line / table row / spec kept whole)
    assert all(np.isfinite(m["value"]) and m["value"] > 0 for m in r["metrics"].values())
    assert r["warnings"] == []
    # MIG: margin = 2 x the manifest's memory MAPE (7.5 %) = 15 %
    want = mig.suggest("h100-80gb", r["metrics"]["peak_mem_mb"]["value"], 0.15)
    assert r["mig"] == want and r["mig"]["margin"] == 0.15


def test_batched_prediction_equals_single(shipped):
    models = [conv_chain(), "examples/resnet18.onnx", conv_chain(channels=(3, 16, 16))]
    together = api.predict(models, batch=2)
    for m, t in zip(models, together):
        [alone] = api.predict([m], batch=2)
        for k in METRICS:
            assert alone["metrics"][k]["value"] == pytest.approx(t["metrics"][k]["value"],
                                                                 rel=1e-5)


def test_chunked_calls_equal_one_call(shipped):
    graphs = [extract(conv_chain(), batch=b) for b in (1, 2, 4)] + \
        [extract("examples/resnet18.onnx", batch=1), extract(conv_chain(), batch=8)]
    sizes = [g.num_nodes for g in graphs]
    cap = sizes[0] + sizes[1]  # the first two together; resnet18 (larger than cap) alone
    runs = seernet_run.chunks(graphs, cap)
    assert [len(r) for r in runs] == [2, 1, 1, 1] and [g for r in runs for g in r] == graphs
    assert all(sum(g.num_nodes for g in r) <= cap or len(r) == 1 for r in runs)
    assert seernet_run.chunks([], cap) == []
    pred = registry.get_predictor(None)
    one_call = seernet_run.run_predictor(pred, graphs, chunk_nodes=sum(sizes))
    chunked = seernet_run.run_predictor(pred, graphs, chunk_nodes=cap)
    assert chunked.shape == (len(graphs), len(METRICS))
    np.testing.assert_allclose(chunked, one_call, rtol=1e-5)


def test_out_of_distribution_warning(shipped):
    [r] = api.predict("examples/resnet18.onnx", batch=64)
    assert any("batch 64 outside" in w for w in r["warnings"])


def test_errors(shipped):
    with pytest.raises(DeviceError, match="unknown device 'tpu'.*testgpu"):
        api.predict("examples/resnet18.onnx", device="tpu")
    with pytest.raises(MetricError, match="does not predict energy_mj"):
        api.predict("examples/resnet18.onnx", metrics=["energy_mj"])
    with pytest.raises(PerfSeerError, match="has no model 'seernet'; it has seernet_multi"):
        api.predict("examples/resnet18.onnx", model="seernet")


def test_model_choice(shipped):
    [default] = api.predict("examples/resnet18.onnx")
    [named] = api.predict("examples/resnet18.onnx", model="seernet_multi")
    assert named == default


def test_cli_predict_and_devices(shipped):
    runner = CliRunner()
    res = runner.invoke(main, ["predict", "examples/resnet18.onnx", "examples/resnet18.onnx",
                               "--batch", "2", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert len(doc) == 2 and doc[0]["mig"]["gpu"] == "h100-80gb"
    res = runner.invoke(main, ["predict", "examples/resnet18.onnx"])
    assert res.exit_code == 0 and "latency_ms" in res.stdout and "MIG profile on h100-80gb" in res.stdout
    res = runner.invoke(main, ["predict", "examples/resnet18.onnx", "--device", "nope"])
    assert res.exit_code == 2 and "unknown device 'nope'" in res.stderr
    res = runner.invoke(main, ["predict", "examples/resnet18.onnx", "--metrics", "sm_util_pct"])
    assert res.exit_code == 2 and "does not predict sm_util_pct" in res.stderr
    res = runner.invoke(main, ["predict", "examples/resnet18.onnx", "--model", "nope"])
    assert res.exit_code == 2 and "has no model 'nope'" in res.stderr
    res = runner.invoke(main, ["devices", "--json"])
    assert res.exit_code == 0
    [dev] = json.loads(res.stdout)
    assert dev["device"] == "testgpu" and dev["mig_gpu"] == "h100-80gb"
    assert dev["models"] == ["seernet_multi"] and dev["default_model"] == "seernet_multi"


def test_mig_rule():
    assert mig.suggest("a100-40gb", 3000, 0.1)["profile"] == "1g.5gb"
    assert mig.suggest("a100-40gb", 4600, 0.1)["profile"] == "2g.10gb"  # 5060 MB > 5 GB
    assert mig.suggest("h200-141gb", 30000, 0.1)["profile"] == "1g.35gb"
    none = mig.suggest("h100-80gb", 79000, 0.1)
    assert none["profile"] is None and "does not fit" in none["reason"]
    assert mig.margin_for(2.0) == 0.10 and mig.margin_for(12.0) == pytest.approx(0.24)


def test_external_weights_leave_session_creation_without_their_copy(tmp_path):
    """onnxruntime holds no copy of weights stored as external data while it
    creates the session (README, "External weights"): the shipped CPU
    predictor's session-creation phase is reported less those bytes, the
    inference phase as before, the peak the larger of the two."""
    registry.predictors.cache_clear()
    pred = registry.get_predictor(None)
    mem, col = pred.memory, {n: j for j, n in enumerate(pred.outputs)}
    m = conv_chain(channels=(3, 256, 256))  # 2.4 MiB of weights
    onnx.save(m, tmp_path / "inline.onnx")
    onnx.save(m, tmp_path / "ext.onnx", save_as_external_data=True, location="ext.data",
              size_threshold=1024)
    graphs = [extract(tmp_path / "inline.onnx", batch=1), extract(tmp_path / "ext.onnx", batch=1)]
    ext_mb = seernet_run.external_weights_mb(graphs)
    assert ext_mb[0] == 0 and ext_mb[1] == pytest.approx(graphs[1].globals["weight_total"] / 2**20,
                                                           rel=1e-3)
    out = seernet_run.reported(pred, seernet_run.run_predictor(pred, graphs), ext_mb)
    inline, ext = out[0], out[1]
    assert ext[col[mem.load]] == pytest.approx(max(inline[col[mem.load]] - ext_mb[1], 0.0))
    assert ext[col[mem.run]] == pytest.approx(inline[col[mem.run]])
    assert ext[col[mem.peak]] == pytest.approx(max(ext[col[mem.load]], ext[col[mem.run]]))
    [r_inline, r_ext] = api.predict([tmp_path / "inline.onnx", tmp_path / "ext.onnx"], batch=1)
    parts = [r["metrics"][mem.peak]["parts"] for r in (r_inline, r_ext)]
    assert parts[1]["session_load_peak_mb"] == pytest.approx(
        max(parts[0]["session_load_peak_mb"] - ext_mb[1], 0.0))
    assert any("stored as external data" in w for w in r_ext["warnings"])
    assert not any("stored as external data" in w for w in r_inline["warnings"])


def test_ops_the_training_data_never_held_are_named_with_their_share():
    """The ONNX Model Zoo's Caffe2 AlexNet, Inception-v1 and ZFNet hold LRN,
    which no model of the CPU predictor's training data does: their latency
    was 31-42 % under the measurement (README, "Real models")."""
    lrn = model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("LRN", ["c"], ["n"], size=5),
                 helper.make_node("Relu", ["n"], ["y"])],
                [("x", ["N", 3, 32, 32])], [("y", None)], [const("w", (16, 3, 3, 3))])
    g = extract(lrn, batch=2)
    seen = registry.get_predictor("cpu-amd-epyc-1t").schema.training_data.ops
    assert seen and "Conv" in seen and "LRN" not in seen
    [named] = seernet_run.unseen_ops(g, seen)
    assert named.startswith("LRN (1 node(s), ") and "of the FLOPs" in named
    # under the share, an op is not named
    assert seernet_run.unseen_ops(g, {**seen, "LRN": 1}) == []
    [r] = api.predict(lrn, batch=2, device="cpu-amd-epyc-1t")
    assert any("training data holds, nor an op of their kind: LRN" in w for w in r["warnings"])
    [plain] = api.predict("examples/resnet18.onnx", batch=2, device="cpu-amd-epyc-1t")
    assert not any("training data holds" in w for w in plain["warnings"])
    tiny = model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", ["c"], ["r"]),
                  helper.make_node("Conv", ["r", "v"], ["d"]),
                  helper.make_node("Softsign", ["d"], ["y"])],
                 [("x", ["N", 64, 32, 32])], [("y", None)],
                 [const("w", (64, 64, 3, 3)), const("v", (1, 64, 1, 1))])
    assert seernet_run.unseen_ops(extract(tiny, batch=1), seen) == []  # Softsign: well under 1 %
    # an unseen op of a kind the training data holds (Caffe2's Sum of two tensors: an Add)
    summed = model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                    helper.make_node("Sum", ["c", "c"], ["y"])],
                   [("x", ["N", 3, 32, 32])], [("y", None)], [const("w", (16, 3, 3, 3))])
    assert "Sum" not in seen and seernet_run.unseen_ops(extract(summed, batch=1), seen) == []
