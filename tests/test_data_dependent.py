"""Output sizes that depend on the data (NonZero, TopK with a run-time K,
NonMaxSuppression, Unique, Compress; If branches of different sizes):
extraction assumes their upper bound and says so (issue 13, "every real
model": detection models). The bound is checked against onnxruntime running
the same graphs on random data."""

import importlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from perfseer_rt import extract
from perfseer_rt.errors import ShapeError
from perfseer_rt.graph import data_dependent
from perfseer_rt.graph.extract import FIXED_SHAPES_WARNING
from perfseer_rt.graph.layout import NODE_COLUMNS
from perfseer_rt.graph.ops import IOU_FLOPS
from perfseer_rt.predict.api import predict
from tests.onnx_builders import const

I64 = TensorProto.INT64
MODELS = Path(__file__).parent / "models"


def _typed(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _with_consumers(nodes, tensors):
    """Each tensor in ``tensors`` read by a Cast, so that it is an edge of the PerfGraph."""
    return nodes + [helper.make_node("Cast", [t], [f"{t}_f"], to=TensorProto.FLOAT)
                    for t in tensors]


def _data_dependent_model(per_class: int) -> onnx.ModelProto:
    watched = ["nz", "tv", "ti", "sel", "uy", "ui", "uinv", "uc", "cy"]
    nodes = _with_consumers([
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("TopK", ["x", "k"], ["tv", "ti"], axis=1),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "maxo"], ["sel"]),
        helper.make_node("Unique", ["x"], ["uy", "ui", "uinv", "uc"], sorted=1),
        helper.make_node("Compress", ["x", "cond"], ["cy"], axis=1),
    ], watched)
    graph = helper.make_graph(
        nodes, "g",
        [_typed("x", TensorProto.FLOAT, ["N", "M"]), _typed("k", I64, [1]),
         _typed("boxes", TensorProto.FLOAT, [1, "B", 4]),
         _typed("scores", TensorProto.FLOAT, [1, "C", "B"]),
         _typed("cond", TensorProto.BOOL, ["M"])],
        [helper.make_tensor_value_info(f"{t}_f", TensorProto.FLOAT, None) for t in watched],
        initializer=[const("maxo", (1,), [per_class], dtype=np.int64)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 5), m=st.integers(1, 5), boxes=st.integers(1, 8),
       classes=st.integers(1, 3), per_class=st.integers(0, 10), seed=st.integers(0, 2**16))
def test_the_assumed_sizes_bound_what_onnxruntime_produces(n, m, boxes, classes, per_class, seed):
    proto = _data_dependent_model(per_class)
    graph = extract(proto, dims={"N": n, "M": m, "B": boxes, "C": classes})
    ours = dict(zip(graph.edge_tensors, graph.edge_shapes))
    kept = classes * min(boxes, per_class)
    assert ours["nz"] == (2, n * m)
    assert ours["tv"] == ours["ti"] == (n, m)
    assert ours["sel"] == (kept, 3)
    assert ours["uy"] == ours["ui"] == ours["uinv"] == ours["uc"] == (n * m,)
    assert ours["cy"] == (n, m)
    assert np.isfinite(graph.x).all() and (graph.x >= 0).all()
    assert any("NonZero: every element non-zero" in w for w in graph.warnings)

    rng = np.random.default_rng(seed)
    corners = rng.random((1, boxes, 2), dtype=np.float32)
    feeds = {
        "x": ((rng.random((n, m)) < 0.5) * rng.integers(0, 3, (n, m))).astype(np.float32),
        "k": np.array([rng.integers(1, m + 1)], dtype=np.int64),
        "boxes": np.concatenate([corners, corners + rng.random((1, boxes, 2),
                                                               dtype=np.float32)], axis=2),
        "scores": rng.random((1, classes, boxes), dtype=np.float32),
        "cond": rng.random(m) < 0.5,
    }
    m_all = onnx.ModelProto()
    m_all.CopyFrom(proto)
    for t in ours:
        m_all.graph.output.append(onnx.ValueInfoProto(name=t))
    sess = ort.InferenceSession(m_all.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    for name, value in zip(names, sess.run(None, feeds)):
        if name in ours:
            bound = ours[name]
            assert len(bound) == value.ndim, name
            assert all(b >= a for b, a in zip(bound, value.shape)), (name, bound, value.shape)


def test_nms_is_costed_by_its_pair_tests():
    graph = extract(_data_dependent_model(per_class=3), dims={"N": 2, "M": 2, "B": 8, "C": 2})
    row = graph.node_ops.index("NonMaxSuppression")
    n, k, lists = 8, 3, 2  # boxes, kept per class (max_output_boxes_per_class), batch x classes
    expected = lists * (IOU_FLOPS * (n * k - k * (k + 1) // 2) + n * 3.0)  # log2(8) = 3
    assert graph.x[row, NODE_COLUMNS.index("flops")] == pytest.approx(expected)


def test_bound_shapes_refuse_what_they_cannot_bound():
    none = lambda pos: None  # noqa: E731
    assert data_dependent.bound_shapes("NonZero", [None], {}, 1, none) is None
    assert data_dependent.bound_shapes("TopK", [(1, (2, 3))], {"axis": 5}, 2, none) is None
    # boxes and scores disagree on the box count
    assert data_dependent.bound_shapes("NonMaxSuppression", [(1, (1, 4, 4)), (1, (1, 2, 5))],
                                       {}, 1, none) is None
    # no max_output_boxes_per_class input: 0 boxes per class (the ONNX default)
    assert data_dependent.bound_shapes("NonMaxSuppression", [(1, (1, 4, 4)), (1, (1, 2, 4))],
                                       {}, 1, none) == [(7, (0, 3))]
    assert data_dependent.bound_shapes("Unique", [(1, (2, 3))], {"axis": 1}, 4, none) == [
        (1, (2, 3)), (7, (3,)), (7, (3,)), (7, (3,))]
    assert data_dependent.bound_shapes("Compress", [(1, (4, 5)), (9, (7,))], {}, 1, none) == [
        (1, (7,))]


def _if_model() -> onnx.ModelProto:
    """An If whose then-branch is an empty constant and whose else-branch
    takes the non-zero positions of an outer tensor, sliced with axes from
    an outer Constant node (torchvision's batched_nms has this shape)."""
    then_branch = helper.make_graph(
        [helper.make_node("Constant", [], ["empty"],
                          value=helper.make_tensor("e", I64, [1, 0], []))],
        "then", [], [_typed("empty", I64, [1, 0])])
    else_branch = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["nz"]),
         helper.make_node("Constant", [], ["starts"], value=helper.make_tensor("s", I64, [1], [0])),
         helper.make_node("Constant", [], ["ends"], value=helper.make_tensor("e2", I64, [1], [1])),
         helper.make_node("Slice", ["nz", "starts", "ends", "axes"], ["rows"])],
        "else", [], [_typed("rows", I64, None)])
    nodes = [
        helper.make_node("Constant", [], ["axes"], value=helper.make_tensor("a", I64, [1], [0])),
        helper.make_node("Relu", ["x0"], ["x"]),
        helper.make_node("If", ["c"], ["picked"], then_branch=then_branch,
                         else_branch=else_branch),
        helper.make_node("Cast", ["picked"], ["out"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(nodes, "g", [_typed("x0", TensorProto.FLOAT, ["N", 6]),
                                           _typed("c", TensorProto.BOOL, [])],
                              [_typed("out", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def test_an_if_takes_the_larger_of_its_branches():
    proto = _if_model()
    graph = extract(proto, batch=2)
    ours = dict(zip(graph.edge_tensors, graph.edge_shapes))
    assert ours["picked"] == (1, 12)  # then (1, 0), else (1, 2 x 6) non-zeros at most
    assert not graph.unknown_ops
    assert any("costed as its heavier branch (else_branch" in w for w in graph.warnings)
    assert any(w.startswith("the output sizes of 1 NonZero node(s)") for w in graph.warnings)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    x0 = np.array([[1, 0, 2, 0, 3, 0]] * 2, dtype=np.float32)
    for c in (True, False):
        out, = sess.run(None, {"x0": x0, "c": np.array(c)})
        assert out.ndim == 2 and out.shape[1] <= 12


def _rank_switch() -> onnx.ModelProto:
    """PyG's ``if x.dim() == 1`` as torch exports it: an If on a condition
    computed from a shape, flattening in one branch (rank 1), keeping the
    tensor in the other (rank 2); then a MatMul on the result."""
    then_branch = helper.make_graph(
        [helper.make_node("Reshape", ["r", "flat"], ["flattened"])],
        "then", [], [_typed("flattened", TensorProto.FLOAT, ["d"])])
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["r"], ["kept"]),
         helper.make_node("MatMul", ["r", "w"], ["worked"]),
         helper.make_node("Add", ["kept", "worked"], ["summed"])],
        "else", [], [_typed("summed", TensorProto.FLOAT, ["d"])])  # torch declares rank 1
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["shape"]),
        helper.make_node("Size", ["shape"], ["rank"]),
        helper.make_node("Equal", ["rank", "one"], ["is_1d"]),
        helper.make_node("If", ["is_1d"], ["picked"], then_branch=then_branch,
                         else_branch=else_branch),
        helper.make_node("MatMul", ["picked", "w"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [_typed("x", TensorProto.FLOAT, ["N", 4])],
                              [_typed("y", TensorProto.FLOAT, None)],
                              initializer=[const("flat", (1,), [-1], dtype=np.int64),
                                           const("one", (), 1, dtype=np.int64),
                                           const("w", (4, 4))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def test_an_if_whose_condition_comes_from_shapes_takes_that_branch():
    """The rank is known before run time, so is the branch: its shapes and
    its cost, exactly (the larger of the two had a rank-1 then-branch against
    a rank-2 else-branch; PyG's GAT failed to extract)."""
    proto = _rank_switch()
    graph = extract(proto, batch=5)
    ours = dict(zip(graph.edge_tensors, graph.edge_shapes))
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    y, = sess.run(None, {"x": np.ones((5, 4), np.float32)})
    assert ours["picked"] == (5, 4) and y.shape == (5, 4)
    # the If does most of the work: it is replaced by the branch it takes
    assert "If" not in graph.node_ops and graph.node_ops.count("MatMul") == 2
    assert graph.globals["flops_total"] == 2 * (2 * 5 * 4 * 4) + 5 * 4 + 5 * 4  # + Add, Relu
    assert not any("heavier branch" in w for w in graph.warnings)
    assert any("the branch its condition selects (else_branch)" in w for w in graph.warnings)


def test_sizes_computed_from_run_time_values_are_a_clear_shape_error():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "g", [_typed("x", TensorProto.FLOAT, [2, 3]),
                                           _typed("s", I64, [2])],
                              [_typed("z", TensorProto.FLOAT, None)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ShapeError, match="depend on values only known at run time"):
        extract(proto)


def test_a_torchvision_detection_model_extracts_and_predicts():
    """SSDlite320 (3 classes, structure-only): its post-processing has
    NonZero, TopK with K = min(candidates, count), NonMaxSuppression inside
    an If (torchvision's batched_nms), and failed with "the shapes of 835
    tensor(s) could not be inferred" before."""
    path = MODELS / "ssdlite_detection.onnx"
    graph = extract(path)
    assert not graph.unknown_ops
    assert graph.node_ops.count("Conv") == 98
    note = next(w for w in graph.warnings if w.startswith("the output sizes of"))
    assert "NonMaxSuppression" in note and "4 NonZero" in note
    result, = predict([path])
    assert result["metrics"]["latency_ms"]["value"] > 0
    assert note in result["warnings"]
    assert FIXED_SHAPES_WARNING in result["warnings"]  # about the CPU predictors' exports
    gpu, = predict([path], device="h100")  # the GPU prior passes the extraction's notes on
    assert note in gpu["warnings"] and FIXED_SHAPES_WARNING not in gpu["warnings"]


def _accumulating_loop(trips_known: bool) -> onnx.ModelProto:
    """A Loop appending one row per iteration to an empty carried tensor (a
    scripted loop's list; torchvision's Keypoint R-CNN has one)."""
    body = helper.make_graph(
        [helper.make_node("Unsqueeze", ["x", "zero"], ["row"]),
         helper.make_node("Concat", ["acc_in", "row"], ["acc_out"], axis=0),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_typed("i", I64, []), _typed("cond_in", TensorProto.BOOL, []),
                 _typed("acc_in", TensorProto.FLOAT, [None, 3])],
        [_typed("cond_out", TensorProto.BOOL, []), _typed("acc_out", TensorProto.FLOAT, [None, 3])],
        initializer=[const("zero", (1,), [0], dtype=np.int64)])
    inits = [const("empty", (0, 3)), const("cond", (), True, dtype=np.bool_)]
    inputs = [_typed("x", TensorProto.FLOAT, [3])]
    if trips_known:
        inits.append(const("trips", (), 5, dtype=np.int64))
    else:
        inputs.append(_typed("trips", I64, []))
    nodes = [helper.make_node("Loop", ["trips", "cond", "empty"], ["acc"], body=body),
             helper.make_node("Relu", ["acc"], ["y"])]
    graph = helper.make_graph(nodes, "g", inputs, [_typed("y", TensorProto.FLOAT, None)],
                              initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("trips_known", [True, False])
def test_an_empty_loop_carried_tensor_gains_a_row_per_iteration(trips_known):
    proto = _accumulating_loop(trips_known)
    graph = extract(proto)
    ours = dict(zip(graph.edge_tensors, graph.edge_shapes))
    assert ours["acc"] == ((5, 3) if trips_known else (1, 3))  # unknown: the 1 iteration the cost assumes
    assert any("1 Loop node(s)" in w and "one row per iteration" in w for w in graph.warnings)
    feeds = {"x": np.ones(3, np.float32)}
    if not trips_known:
        feeds["trips"] = np.array(1, np.int64)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.run(None, feeds)[0].shape == ours["acc"]


def test_a_loop_over_a_dynamic_length_stacks_its_scan_outputs_and_costs_every_step():
    """A while-loop as tf2onnx writes a Keras RNN: the trip count is the
    sequence length read from a shape; each step multiplies one time slice by
    a weight and emits it as a scan output. Its scan output was unresolved
    (the extraction failed) and its cost counted one step."""
    body = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["step"], axis=1),
         helper.make_node("MatMul", ["step", "w"], ["h"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_typed("i", I64, []), _typed("cond_in", TensorProto.BOOL, [])],
        [_typed("cond_out", TensorProto.BOOL, []), _typed("h", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["steps"], axis=0),
             helper.make_node("Loop", ["steps", "cond"], ["hs"], body=body),
             helper.make_node("Relu", ["hs"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [_typed("x", TensorProto.FLOAT, ["batch", "seq", 8])],
        [_typed("y", TensorProto.FLOAT, None)],
        initializer=[const("one", (), 1, dtype=np.int64), const("cond", (), True, dtype=np.bool_),
                     const("w", (8, 6))])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 9
    g = extract(proto, batch=2, dims={"seq": 7})
    ours = dict(zip(g.edge_tensors, g.edge_shapes))
    assert ours["hs"] == (7, 2, 6)
    assert not any("trip count unknown" in w for w in g.warnings)
    loop = g.node_ops.index("Loop")
    assert g.x[loop, NODE_COLUMNS.index("flops")] == 7 * 2 * 2 * 8 * 6  # 7 steps of a 2x8x6 MatMul
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": np.ones((2, 7, 8), np.float32)})[0].shape == ours["hs"]


def test_nested_branches_read_tensors_from_every_enclosing_scope(monkeypatch):
    """An If inside an If's branch, whose branches read the top graph's x:
    the inner branches could not be shaped (x was not passed down), so the
    outer If was 'a branch could not be costed'."""
    def branch(depth: int, tag: str) -> onnx.GraphProto:
        if depth == 0:
            node = helper.make_node("Relu", ["x"], [f"y{tag}"])
        else:
            node = helper.make_node("If", ["c"], [f"y{tag}"], then_branch=branch(depth - 1, tag + "t"),
                                    else_branch=branch(depth - 1, tag + "e"))
        return helper.make_graph([node], f"g{tag}", [], [_typed(f"y{tag}", TensorProto.FLOAT, None)])

    top = helper.make_node("If", ["c"], ["out"], then_branch=branch(2, "t"),
                           else_branch=branch(2, "e"))
    graph = helper.make_graph([top, helper.make_node("Relu", ["out"], ["z"])], "g",
                              [_typed("x", TensorProto.FLOAT, ["batch", 8]),
                               _typed("c", TensorProto.BOOL, [])],
                              [_typed("z", TensorProto.FLOAT, None)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g = extract(proto, batch=3)
    # every level does all the work: each If in turn is extracted as its heavier branch
    assert sum("of the model's work" in w and "(else_branch)" in w for w in g.warnings) == 3
    assert g.node_ops == ["Relu", "Relu"] and g.globals["flops_total"] == 2 * 3 * 8
    assert dict(zip(g.edge_tensors, g.edge_shapes))["out"] == (3, 8)
    # never dominant: the If stays one node, costed as its heavier branch
    monkeypatch.setattr(importlib.import_module("perfseer_rt.graph.extract"),
                        "DOMINANT_IF_SHARE", 2.0)
    whole = extract(proto, batch=3)
    assert any(w.endswith("costed as its heavier branch (else_branch, 24 FLOPs)")
               for w in whole.warnings)


def _merged(plain: onnx.ModelProto) -> onnx.ModelProto:
    """``plain`` twice, as the then- and else-branch of an If on a bool[1]
    input (optimum's merged decoders switch their with- and without-cache
    decoders so); every name of a copy suffixed to keep names unique."""
    def branch(tag: str) -> onnx.GraphProto:
        g = plain.graph
        rename = {o: o + tag for n in g.node for o in n.output}
        rename.update({t.name: t.name + tag for t in g.initializer})
        b = onnx.GraphProto(name=tag)
        for n in g.node:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            c.name = n.name + tag
            c.input[:] = [rename.get(t, t) for t in n.input]
            c.output[:] = [rename.get(t, t) for t in n.output]
            b.node.append(c)
        for t in g.initializer:
            c = onnx.TensorProto()
            c.CopyFrom(t)
            c.name = rename[t.name]
            b.initializer.append(c)
        b.output.extend(_typed(rename.get(o.name, o.name), o.type.tensor_type.elem_type, None)
                        for o in g.output)
        return b

    outs = [f"out{i}" for i in range(len(plain.graph.output))]
    graph = helper.make_graph(
        [helper.make_node("If", ["use_cache_branch"], outs, then_branch=branch("_a"),
                          else_branch=branch("_b")), helper.make_node("Relu", ["out0"], ["z"])],
        "merged", list(plain.graph.input) + [_typed("use_cache_branch", TensorProto.BOOL, [1])],
        [_typed("z", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=plain.opset_import)
    m.ir_version = plain.ir_version
    return m


def test_an_if_doing_most_of_the_work_is_extracted_as_its_branch():
    """A merged decoder predicted like the plain one: it was one If node of
    summed FLOPs and no weights (CPU memory 2.6 MiB for a BERT-base whose
    plain export predicts 490)."""
    plain = onnx.load(str(MODELS / "bert_small.onnx"), load_external_data=False)
    merged = _merged(plain)
    kw = {"batch": 2, "dims": {"seq": 16}}
    a, b = extract(plain, **kw), extract(merged, **kw)
    assert b.num_nodes == a.num_nodes + 1  # the Relu after the If
    relu = max(i for i, op in enumerate(b.node_ops) if op == "Relu")
    assert b.globals["flops_total"] == a.globals["flops_total"] + b.node_column("flops")[relu]
    for key in ("params_total", "weight_total"):
        assert b.globals[key] == a.globals[key]
    assert any(w.startswith("If node 'out0' does 100% of the model's work") for w in b.warnings)
    pa, pb = predict([plain], **kw)[0], predict([merged], **kw)[0]
    for metric in ("latency_ms", "peak_mem_mb"):
        assert pb["metrics"][metric]["value"] == pytest.approx(pa["metrics"][metric]["value"],
                                                              rel=0.02)


def test_inlining_a_branch_maps_its_outputs_to_the_if_outputs():
    from perfseer_rt.graph.inline import inline_branches

    then_branch = helper.make_graph([helper.make_node("Relu", ["x"], ["r"])], "t", [],
                                    [_typed("r", TensorProto.FLOAT, None),
                                     _typed("x", TensorProto.FLOAT, None)])  # an outer tensor
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["n"])], "e", [],
                              [_typed("n", TensorProto.FLOAT, None),
                               _typed("x", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y", "x2"], then_branch=then_branch, else_branch=other),
         helper.make_node("Add", ["y", "x2"], ["z"])], "g",
        [_typed("x", TensorProto.FLOAT, [2]), _typed("c", TensorProto.BOOL, [])],
        [_typed("z", TensorProto.FLOAT, None)])
    inlined = inline_branches(helper.make_model(graph), {"y": "then_branch"})
    assert [(n.op_type, list(n.input), list(n.output)) for n in inlined.graph.node] == [
        ("Relu", ["x"], ["y"]), ("Identity", ["x"], ["x2"]), ("Add", ["y", "x2"], ["z"])]


def _decoder_pair() -> onnx.ModelProto:
    """A merged decoder whose branches differ: the then-branch (with cache)
    one MatMul, the else-branch (without) three, so the heavier is else."""
    x = "x"
    light = helper.make_graph([helper.make_node("MatMul", [x, "w"], ["y_a"])], "with_cache", [],
                              [_typed("y_a", TensorProto.FLOAT, None)])
    heavy = helper.make_graph([helper.make_node("MatMul", [x, "w"], ["h1"]),
                               helper.make_node("MatMul", ["h1", "w"], ["h2"]),
                               helper.make_node("MatMul", ["h2", "w"], ["y_b"])], "without", [],
                              [_typed("y_b", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("If", ["use_cache_branch"], ["out"], then_branch=light,
                          else_branch=heavy), helper.make_node("Relu", ["out"], ["z"])],
        "merged", [_typed("x", TensorProto.FLOAT, ["N", 16]),
                   _typed("use_cache_branch", TensorProto.BOOL, [1])],
        [_typed("z", TensorProto.FLOAT, None)], initializer=[const("w", (16, 16))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("switch", [None, 0, 1])
def test_a_merged_decoders_switch_input_picks_its_branch(switch):
    """``--dim use_cache_branch=1`` predicts the decode step a merged
    decoder runs with its cache; unset, the heavier branch is taken and the
    warning says how to choose (optimum's Whisper merged decoder at one new
    token and 100 cached: 50.6 MFLOPs predicted, its decode step 1.29)."""
    m = _decoder_pair()
    dims = {} if switch is None else {"use_cache_branch": switch}
    g = extract(m, batch=4, dims=dims)
    matmuls = 2 * 4 * 16 * 16
    assert g.globals["flops_total"] == (1 if switch == 1 else 3) * matmuls + 4 * 16  # + the Relu
    assert g.node_ops.count("MatMul") == (1 if switch == 1 else 3)  # the branch's nodes, inlined
    note = next(w for w in g.warnings if w.startswith("If node"))
    if switch is None:
        assert "its heavier branch (else_branch)" in note
        assert "--dim use_cache_branch=1 takes then_branch" in note
    else:
        assert "the branch its condition selects" in note and "--dim" not in note
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    sess.run(None, {"x": np.ones((4, 16), np.float32),
                    "use_cache_branch": np.array([bool(switch)])})  # the file runs either way


def test_an_if_on_a_size_the_data_decides_keeps_the_heavier_branch():
    """A detector's ``if boxes.numel() > 0``: the count is NonZero's,
    assumed at its bound, so the condition computed from it is no fact (the
    bound says "some" whatever the data): the heavier branch is costed, as
    for any condition known only at run time."""
    light = helper.make_graph([helper.make_node("ReduceMax", ["x", "axis0"], ["pooled"])],
                              "then", [], [_typed("pooled", TensorProto.FLOAT, None)])
    work = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]),
                              helper.make_node("MatMul", ["h", "w"], ["some"])], "else", [],
                             [_typed("some", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Size", ["nz"], ["count"]),
             helper.make_node("Greater", ["count", "zero"], ["any_boxes"]),
             helper.make_node("If", ["any_boxes"], ["out"], then_branch=light, else_branch=work),
             helper.make_node("Relu", ["out"], ["y"])]
    graph = helper.make_graph(nodes, "g", [_typed("x", TensorProto.FLOAT, ["N", 8])],
                              [_typed("y", TensorProto.FLOAT, None)],
                              initializer=[const("w", (8, 8)), const("zero", (), 0, dtype=np.int64),
                                           const("axis0", (1,), [0], dtype=np.int64)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    g = extract(m, batch=3)
    assert dict(zip(g.edge_tensors, g.edge_shapes))["out"] == (3, 8)  # the larger of (1, 8), (3, 8)
    assert any("heavier branch (else_branch" in w for w in g.warnings)
    assert not any("the branch its condition selects" in w for w in g.warnings)
