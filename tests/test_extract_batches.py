"""extract_batches (one model, many batch sizes) and the constant-folding
fast path: both must give exactly what the plain path gives."""

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from perfseer_rt import extract
from perfseer_rt.errors import ShapeError
from perfseer_rt.graph import extract_batches, features, prepared
from perfseer_rt.graph import shapes as shapes_mod
from perfseer_rt.graph.const_eval import fast_value
from tests.test_extract import conv_chain

ROOT = Path(__file__).resolve().parents[1]


def same_graph(a, b) -> None:
    for k in ("x", "edge_index", "edge_attr", "u"):
        x, y = getattr(a, k), getattr(b, k)
        assert x.dtype == y.dtype and np.array_equal(x, y), k
    for k in ("node_names", "node_ops", "edge_tensors", "edge_shapes", "unknown_ops",
              "input_shapes", "info", "warnings"):
        assert getattr(a, k) == getattr(b, k), k


@pytest.mark.parametrize("source, kw", [
    (conv_chain(), {}),
    (ROOT / "examples" / "resnet18.onnx", {}),
    (ROOT / "tests" / "models" / "bert_small.onnx", {"dims": {"seq": 32}}),
    (ROOT / "tests" / "models" / "gpt2_kv.onnx", {"dims": {"seq": 8, "past_seq": 4, "total_seq": 12}}),
])
def test_batches_equal_one_by_one(source, kw):
    batches = [1, 4, None, 2]
    many = extract_batches(source, batches, **kw)
    assert len(many) == len(batches)
    for b, g in zip(batches, many):
        same_graph(g, extract(source, batch=b, **kw))
    assert many[1].globals["batch_size"] == 4


def test_structure_work_is_done_once(monkeypatch):
    folds, skeletons = [], []
    real_fold, real_skeleton = prepared.fold_static, shapes_mod.skeleton
    monkeypatch.setattr(prepared, "fold_static", lambda *a: folds.append(1) or real_fold(*a))
    monkeypatch.setattr(prepared, "skeleton", lambda *a: skeletons.append(1) or real_skeleton(*a))
    extract_batches(conv_chain(), [1, 2, 3])
    assert (len(folds), len(skeletons)) == (1, 0)  # shapes from the Python pass
    # where the pass gives up, onnx's skeleton is built once and re-shaped
    monkeypatch.setattr(prepared.PreparedModel, "propagate", lambda self, inputs, deadline: None)
    extract_batches(conv_chain(), [1, 2, 3])
    assert (len(folds), len(skeletons)) == (2, 1)


def test_bad_batch_is_the_same_typed_error():
    with pytest.raises(ShapeError) as one:
        extract(conv_chain(), batch=0)
    with pytest.raises(ShapeError) as many:
        extract_batches(conv_chain(), [1, 0])
    assert str(many.value) == str(one.value)


def _reference(node, inputs: dict):
    graph = helper.make_graph(
        [node], "g", [], [onnx.ValueInfoProto(name=o) for o in node.output],
        initializer=[onnx.numpy_helper.from_array(v, k) for k, v in inputs.items()])
    return ReferenceEvaluator(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)])).run(None, {})


@pytest.mark.parametrize("node, inputs", [
    (helper.make_node("Constant", [], ["c"],
                      value=helper.make_tensor("v", TensorProto.INT64, [2], [3, -1])), {}),
    (helper.make_node("Constant", [], ["c"], value_ints=[1, 2, 3]), {}),
    (helper.make_node("Constant", [], ["c"], value_int=7), {}),
    (helper.make_node("Constant", [], ["c"],
                      value=helper.make_tensor("v", TensorProto.FLOAT, [], [0.5])), {}),
    (helper.make_node("Identity", ["a"], ["c"]), {"a": np.array([4, 5], np.int64)}),
    (helper.make_node("Gather", ["a", "i"], ["c"], axis=0),
     {"a": np.array([2, 3, 224, 224], np.int64), "i": np.array(-1, np.int64)}),
    (helper.make_node("Gather", ["a", "i"], ["c"]),
     {"a": np.array([2, 3, 224], np.int64), "i": np.array([0, 2], np.int64)}),
    (helper.make_node("Unsqueeze", ["a", "ax"], ["c"]),
     {"a": np.array(5, np.int64), "ax": np.array([0], np.int64)}),
    (helper.make_node("Unsqueeze", ["a", "ax"], ["c"]),
     {"a": np.array([5, 6], np.int64), "ax": np.array([0, -1], np.int64)}),
    (helper.make_node("Concat", ["a", "b"], ["c"], axis=0),
     {"a": np.array([1], np.int64), "b": np.array([-1, 64], np.int64)}),
])
def test_fast_constant_values_match_the_reference_evaluator(node, inputs):
    fast = fast_value(node, dict(inputs))
    assert fast is not None
    (want,) = _reference(node, inputs)
    assert fast[0].dtype == want.dtype and fast[0].shape == want.shape
    assert np.array_equal(fast[0], want)


@pytest.mark.parametrize("node, inputs", [
    (helper.make_node("Concat", ["a", "b"], ["c"], axis=-1),  # negative axis: not handled
     {"a": np.array([1], np.int64), "b": np.array([2], np.int64)}),
    (helper.make_node("Gather", ["a", "i"], ["c"]), {"a": np.array([1, 2], np.int64)}),
    (helper.make_node("Add", ["a", "a"], ["c"]), {"a": np.array([1], np.int64)}),
    (helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
        "v", TensorProto.INT64, [1 << 17], np.zeros(1 << 17, np.int64))), {}),
])
def test_fast_path_declines_what_it_does_not_cover(node, inputs):
    assert fast_value(node, dict(inputs)) is None


@pytest.mark.parametrize("name, kw", [
    ("bert_small.onnx", {"dims": {"seq": 32}}),
    ("swin_tiny.onnx", {"batch": 1}),
    ("gpt2_kv.onnx", {"dims": {"seq": 8, "past_seq": 4, "total_seq": 12}}),
])
def test_one_pass_completion_equals_rounds_of_inference(name, kw, monkeypatch):
    """Shapes onnx leaves open are completed in one per-node pass; the
    rounds of whole-graph inference it replaced (still the fallback) give
    the same graph."""
    path = ROOT / "tests" / "models" / name
    fast = extract(path, **kw)
    monkeypatch.setattr(shapes_mod, "_complete_per_node", lambda *a: None)
    same_graph(fast, extract(path, **kw))


def test_bert_needs_no_rounds(monkeypatch):
    def no_rounds(*a):
        raise AssertionError("a round of whole-graph inference ran")

    monkeypatch.setattr(shapes_mod, "evaluate_constants", no_rounds)
    g = extract(ROOT / "tests" / "models" / "bert_small.onnx", dims={"seq": 32})
    assert g.globals["flops_total"] > 0


def test_signature_caches_change_no_result():
    """Features and shape-rule results are kept per node signature between
    calls; a model extracted after others (warm caches) equals the same
    model extracted from cold."""
    ex = sys.modules["perfseer_rt.graph.extract"]
    sources = [(conv_chain(), {}), (ROOT / "examples" / "resnet18.onnx", {"batch": 2}),
               (ROOT / "tests" / "models" / "bert_small.onnx", {"dims": {"seq": 32}}),
               (conv_chain(), {"batch": 3}), (ROOT / "examples" / "resnet18.onnx", {})]
    cold = []
    for source, kw in sources:
        ex.clear_caches()
        cold.append(extract(source, **kw))
    assert features._FEATURES  # filled by the last call
    warm = [extract(source, **kw) for source, kw in sources]
    for a, b in zip(cold, warm):
        same_graph(a, b)


def test_signature_cache_is_bounded(monkeypatch):
    ex = sys.modules["perfseer_rt.graph.extract"]
    monkeypatch.setattr(features, "SIGNATURE_CACHE_SIZE", 4)
    ex.clear_caches()
    g = extract(ROOT / "examples" / "resnet18.onnx")
    assert 0 < len(features._FEATURES) <= 4
    ex.clear_caches()
    same_graph(g, extract(ROOT / "examples" / "resnet18.onnx"))
