"""Smaller shipped predictors (training/seernet/compact_weights.py,
training/seernet/tree_ensemble.py, training/byod/reference_set.py): weights
in float16 or int8 computed in float32, trees as ``TreeEnsemble``, short
names in the calibration references; and what ships matches its manifest."""

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from perfseer_rt import extract
from perfseer_rt.calibrate.reference import references
from training.byod.reference_set import short_names
from training.seernet.compact_weights import MIN_ELEMENTS, compact_predictor, compact_weights, strip_metadata
from training.seernet.shared_weights import share_weights
from training.seernet.tree_ensemble import ML_DOMAIN, convert_model

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "exported_models"


def _run(model: onnx.ModelProto | str, feeds: dict) -> list[np.ndarray]:
    data = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


def _mlp(seed: int = 0) -> onnx.ModelProto:
    """x[4, 96] -> Gemm(transB) 128 -> Relu -> MatMul 64 -> y, float32."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((128, 96)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((128, 64)).astype(np.float32) * 0.1
    b1 = rng.standard_normal(128).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 96])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
                               numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("storage,rtol,ratio", [("float16", 2e-3, 0.52), ("int8", 3e-2, 0.27)])
def test_compacted_weights_compute_nearly_the_same_in_float32(storage, rtol, ratio):
    model = _mlp()
    feeds = {"x": np.random.default_rng(1).standard_normal((4, 96)).astype(np.float32)}
    want = _run(model, feeds)[0]
    size = model.ByteSize()
    assert compact_weights(model, storage) == 2  # the two matrices; the bias stays float32
    assert model.ByteSize() < ratio * size
    got = _run(model, feeds)[0]
    assert got.dtype == np.float32
    assert np.max(np.abs(got - want)) <= rtol * np.max(np.abs(want))
    assert compact_weights(model, storage) == 0  # already compact
    again = _mlp()
    compact_weights(again, storage)
    assert again.SerializeToString() == model.SerializeToString()  # deterministic: blends can share it


def test_int8_is_per_output_channel_within_half_a_step():
    model = _mlp()
    original = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    compact_weights(model, "int8")
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for name, axis in (("w1", 0), ("w2", 1)):  # Gemm transB: rows; MatMul: columns
        q, scale = inits[f"{name}.int8"], inits[f"{name}.scale"]
        assert q.dtype == np.int8 and scale.size == scale.shape[axis] == original[name].shape[axis]
        assert np.all(np.abs(q.astype(np.float32) * scale - original[name]) <= scale / 2 * (1 + 1e-6))
        assert np.max(np.abs(q)) == 127


def test_a_blend_of_the_compacted_network_still_shares_its_weights(tmp_path):
    base, head = _mlp(), _mlp()
    head.graph.node[-1].output[0] = "h2"
    head.graph.node.append(helper.make_node("Neg", ["h2"], ["y"]))
    for m in (base, head):
        compact_weights(m, "float16")
    (tmp_path / "base.onnx").write_bytes(base.SerializeToString())
    (tmp_path / "head.onnx").write_bytes(head.SerializeToString())
    feeds = {"x": np.ones((4, 96), np.float32)}
    before = _run(str(tmp_path / "head.onnx"), feeds)[0]
    assert share_weights(tmp_path / "head.onnx", tmp_path / "base.onnx") == 2
    assert np.array_equal(_run(str(tmp_path / "head.onnx"), feeds)[0], before)
    assert np.array_equal(before, -_run(base, feeds)[0])


def test_compact_predictor_redoes_the_sharing_and_the_checksums(tmp_path):
    """A folder exported before: float32 ``seernet.onnx`` and a blend reading
    its weights from it; compacted in place, the blend reads the new bytes."""
    seernet, blend = _mlp(), _mlp()
    blend.graph.node[-1].output[0] = "h2"
    blend.graph.node.append(helper.make_node("Neg", ["h2"], ["y"]))
    (tmp_path / "seernet.onnx").write_bytes(seernet.SerializeToString())
    (tmp_path / "seernet_gbm.onnx").write_bytes(blend.SerializeToString())
    assert share_weights(tmp_path / "seernet_gbm.onnx", tmp_path / "seernet.onnx") == 2
    entries = [{"name": n, "file": f"{n}.onnx", "sha256": "0" * 64} for n in ("seernet", "seernet_gbm")]
    (tmp_path / "manifest.json").write_text(json.dumps({"seernet": {"models": entries}}))
    feeds = {"x": np.random.default_rng(2).standard_normal((4, 96)).astype(np.float32)}
    before = _run(str(tmp_path / "seernet_gbm.onnx"), feeds)[0]
    size = (tmp_path / "seernet.onnx").stat().st_size
    assert compact_predictor(tmp_path, "float16") == {"seernet.onnx": 2, "seernet_gbm.onnx": 2}
    assert (tmp_path / "seernet.onnx").stat().st_size < 0.52 * size
    shared = [t for t in onnx.load(str(tmp_path / "seernet_gbm.onnx"), load_external_data=False).graph.initializer
              if t.data_location == TensorProto.EXTERNAL]
    assert len(shared) == 2 and all(t.data_type == TensorProto.FLOAT16 for t in shared)
    after = _run(str(tmp_path / "seernet_gbm.onnx"), feeds)[0]
    assert np.array_equal(after, -_run(str(tmp_path / "seernet.onnx"), feeds)[0])
    assert np.max(np.abs(after - before)) <= 2e-3 * np.max(np.abs(before))
    for entry in json.loads((tmp_path / "manifest.json").read_text())["seernet"]["models"]:
        assert entry["sha256"] == hashlib.sha256((tmp_path / entry["file"]).read_bytes()).hexdigest()
    assert compact_predictor(tmp_path, "float16") == {"seernet.onnx": 0, "seernet_gbm.onnx": 0}


def _regressor(missing: list[int]) -> onnx.ModelProto:
    """Two trees over u[:, 0..1] in ``TreeEnsembleRegressor`` (ai.onnx.ml 3):
    tree 0 a split with a split below it, tree 1 one split."""
    node = helper.make_node(
        "TreeEnsembleRegressor", ["u"], ["z"], domain=ML_DOMAIN, n_targets=1, aggregate_function="SUM",
        base_values=[0.25],
        nodes_treeids=[0, 0, 0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 3, 4, 0, 1, 2],
        nodes_featureids=[0, 1, 0, 0, 0, 1, 0, 0], nodes_values=[0.5, -1.0, 0, 0, 0, 2.0, 0, 0],
        nodes_modes=["BRANCH_LEQ", "BRANCH_LEQ", "LEAF", "LEAF", "LEAF", "BRANCH_LEQ", "LEAF", "LEAF"],
        nodes_truenodeids=[1, 2, 0, 0, 0, 1, 0, 0], nodes_falsenodeids=[4, 3, 0, 0, 0, 2, 0, 0],
        nodes_missing_value_tracks_true=missing,
        target_treeids=[0, 0, 0, 1, 1], target_nodeids=[2, 3, 4, 1, 2], target_ids=[0] * 5,
        target_weights=[1.0, 2.0, 4.0, 8.0, 16.0])
    graph = helper.make_graph([node], "trees", [helper.make_tensor_value_info("u", TensorProto.FLOAT, [None, 2])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(ML_DOMAIN, 3)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("missing", [[0] * 8, [1, 0, 0, 0, 0, 1, 0, 0]])
def test_tree_ensemble_computes_what_the_regressor_computes(missing):
    u = np.array([[0.0, -2.0], [0.0, 0.0], [1.0, 3.0], [0.5, 2.0], [np.nan, 1.0], [0.0, np.nan]], np.float32)
    old = _regressor(missing)
    want = _run(old, {"u": u})[0]
    # base 0.25 + tree 0 (leaves 1, 2, 4) + tree 1 (leaves 8, 16); NaN goes where the flag says
    assert want[:, 0].tolist() == [9.25, 10.25, 20.25, 10.25, 10.25 if missing[0] else 12.25,
                                   10.25 if missing[5] else 18.25]
    new = _regressor(missing)
    assert convert_model(new) == 1
    onnx.checker.check_model(new)
    assert [n.op_type for n in new.graph.node] == ["TreeEnsemble", "Add"]
    assert np.array_equal(_run(new, {"u": u})[0], want)
    assert new.ByteSize() < old.ByteSize()


def test_short_names_keep_the_perfgraph(tmp_path):
    src = ROOT / "tests" / "models" / "bert_small.onnx"
    proto = onnx.load(str(src), load_external_data=False)
    short_names(proto)
    assert all(re.fullmatch(r"n[0-9a-z]+", n.name) for n in proto.graph.node)
    out = tmp_path / "short.onnx"
    out.write_bytes(proto.SerializeToString())
    dims = {"seq": 16}
    a, b = extract(src, batch=2, dims=dims), extract(out, batch=2, dims=dims)
    for k in ("x", "edge_index", "edge_attr", "u"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    assert out.stat().st_size < src.stat().st_size


def test_shipped_calibration_references_have_short_names():
    for ref in references():
        graph = onnx.load(str(ref.path), load_external_data=False).graph
        assert all(re.fullmatch(r"n[0-9a-z]+", n.name) for n in graph.node), ref.name


def test_shipped_seernets_store_no_float32_matrix_and_no_exporter_metadata():
    files = sorted(MODELS.glob("*/seernet*.onnx")) + sorted(MODELS.glob("*/train/seernet*.onnx"))
    assert len(files) == 5
    for path in files:
        model = onnx.load(str(path), load_external_data=False)
        big = [t for t in model.graph.initializer if len(t.dims) == 2 and int(np.prod(t.dims)) >= MIN_ELEMENTS]
        assert big and all(t.data_type in (TensorProto.FLOAT16, TensorProto.INT8) for t in big), path
        assert strip_metadata(model) == 0, path
        assert not any(n.op_type == "TreeEnsembleRegressor" for n in model.graph.node), path


def test_manifest_checksums_match_the_shipped_files():
    manifests = sorted(MODELS.glob("*/manifest.json")) + sorted(MODELS.glob("*/train/manifest.json"))
    checked = 0
    for manifest in manifests:
        section = json.loads(manifest.read_text()).get("seernet") or {}
        for entry in section.get("models", []):
            data = (manifest.parent / entry["file"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == entry["sha256"], f"{manifest.parent.name}/{entry['file']}"
            checked += 1
        unc = section.get("uncertainty") or {}
        if unc.get("reference_file"):
            data = (manifest.parent / unc["reference_file"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == unc["reference_sha256"]
            checked += 1
    assert checked >= 6
