"""ONNX export of SeerNet: parity with torch on varied graphs, and the manifest."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch

from perfseer_rt.graph import layout
from perfseer_rt.predict.manifest import INTRA_OP_THREADS, parse_manifest
from training.seernet import (
    Normalization,
    SeerNet,
    SeerNetConfig,
    SeerNetMulti,
    concat_graphs,
)
from training.seernet.data import dataset_summary
from training.seernet.export import NormalizedPredictor, export_seernet, run_onnx
from training.seernet.manifest import model_entry, write_manifest
from training.seernet.seernet import StackedPredictor
from training.seernet.synthetic import random_graph

METRICS = ["latency_ms", "peak_mem_mb"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    rng = np.random.default_rng(0)
    train = [random_graph(rng, int(rng.integers(2, 40)), batch=int(rng.choice([1, 32]))) for _ in range(30)]
    norm = Normalization.fit(train, METRICS)
    torch.manual_seed(0)
    model = StackedPredictor([SeerNet(SeerNetConfig(num_outputs=1)) for _ in METRICS]).eval()
    path = export_seernet(model, norm, tmp_path_factory.mktemp("onnx") / "seernet.onnx", METRICS)
    return path, NormalizedPredictor(model, norm, METRICS).eval(), norm, model


def _cases():
    rng = np.random.default_rng(1)
    single = random_graph(rng, 1)
    no_edges = random_graph(rng, 6)
    no_edges.edge_index = np.zeros((2, 0), np.int64)
    no_edges.edge_attr = np.zeros((0, len(layout.EDGE_COLUMNS)))
    many = [random_graph(rng, int(rng.integers(1, 60)), batch=int(rng.choice([1, 4, 64]))) for _ in range(64)]
    return {"single node": [single], "no edges": [no_edges, no_edges], "many graphs": many,
            "large graph": [random_graph(rng, 2000, batch=8)], "mixed": [single, no_edges] + many[:5]}


@pytest.mark.parametrize("case", list(_cases()))
def test_onnx_matches_torch(exported, case):
    path, wrapped, _, _ = exported
    graphs = _cases()[case]
    a = concat_graphs([g.x for g in graphs], [g.edge_index for g in graphs], [g.edge_attr for g in graphs],
                      [g.u for g in graphs])
    got = run_onnx(path, **a)
    with torch.no_grad():
        want = wrapped(*(torch.from_numpy(a[k]) for k in ("x", "edge_index", "edge_attr", "u", "node_batch")))
    assert got.shape == (len(graphs), 2) and np.isfinite(got).all() and (got > 0).all()
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=0)


def test_onnx_outputs_metric_units(exported):
    """The baked-in normalization equals the numpy one used in training."""
    path, _, norm, model = exported
    g = random_graph(np.random.default_rng(5), 10)
    a = concat_graphs([g.x], [g.edge_index], [g.edge_attr], [g.u])
    n = norm.apply(g)
    with torch.no_grad():
        t = model(torch.from_numpy(n.x), torch.from_numpy(g.edge_index), torch.from_numpy(n.edge_attr),
                  torch.from_numpy(n.u)[None], torch.zeros(10, dtype=torch.long)).numpy()
    np.testing.assert_allclose(run_onnx(path, **a), norm.decode_targets(t, METRICS), rtol=1e-4)


def test_onnx_signature_and_ops(exported):
    path = exported[0]
    m = onnx.load(path)
    assert m.opset_import[0].version >= 18
    assert [i.name for i in m.graph.input] == ["x", "edge_index", "edge_attr", "u", "node_batch"]
    assert [o.name for o in m.graph.output] == ["y"]
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in m.graph.input}
    assert isinstance(dims["x"][0], str) and dims["x"][1] == len(layout.NODE_COLUMNS)
    assert isinstance(dims["u"][0], str) and isinstance(dims["edge_index"][1], str)
    assert {n.domain for n in m.graph.node} <= {"", "ai.onnx"}  # standard ops only
    ops = {n.op_type for n in m.graph.node}
    assert "ScatterND" in ops and "ScatterElements" not in ops  # row scatters (onnx_rewrite)


def test_export_multi_and_manifest(tmp_path, exported):
    _, _, norm, _ = exported
    rng = np.random.default_rng(2)
    samples = [random_graph(rng, int(rng.integers(2, 20))) for _ in range(5)]
    multi = SeerNetMulti(SeerNetConfig(hidden=32, num_outputs=2)).eval()
    path = export_seernet(multi, norm, tmp_path / "seernet_multi.onnx")
    entry = model_entry(path, "seernet_multi", METRICS, 123)
    man = write_manifest(tmp_path / "manifest.json", device="cpu-1t", description={"cpu": "test"},
                         metrics=METRICS, normalization=norm, models=[entry],
                         training_data=dataset_summary(samples, METRICS), accuracy={"arch": {}})
    back = json.loads((tmp_path / "manifest.json").read_text())
    assert back == man
    assert back["feature_version"] == layout.FEATURE_VERSION
    assert back["metrics"] == [{"name": "latency_ms", "unit": "ms"}, {"name": "peak_mem_mb", "unit": "MB"}]
    section = back["seernet"]
    assert section["models"][0]["file"] == "seernet_multi.onnx" and len(section["models"][0]["sha256"]) == 64
    assert Normalization.from_dict(section["normalization"]).to_dict() == norm.to_dict()
    assert section["session"] == {"intra_op_num_threads": 1}
    assert parse_manifest(back).seernet.models[0].name == "seernet_multi"
    assert "other" in back["op_vocabulary"]


def test_runtime_session_is_single_threaded(exported):
    """Row scatters (ScatterND reductions) race across onnxruntime threads, so
    the runtime must run predictors on one intra-op thread: repeated batched
    runs of a large graph are bit-identical and match torch."""
    from perfseer_rt.predict import seernet_run

    path, wrapped, _, _ = exported
    sess = seernet_run._session(str(path), INTRA_OP_THREADS)
    assert sess.get_session_options().intra_op_num_threads == 1
    g = _cases()["large graph"]
    a = concat_graphs([x.x for x in g], [x.edge_index for x in g], [x.edge_attr for x in g], [x.u for x in g])
    runs = {sess.run(None, a)[0].tobytes() for _ in range(5)}
    assert len(runs) == 1
    with torch.no_grad():
        want = wrapped(*(torch.from_numpy(a[k]) for k in ("x", "edge_index", "edge_attr", "u", "node_batch")))
    np.testing.assert_allclose(sess.run(None, a)[0], want.numpy(), rtol=1e-4, atol=0)
