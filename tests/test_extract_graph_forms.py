"""Valid graphs in unusual forms, extracted as onnxruntime runs them: Loop
and If costs, model-local functions inlined (recursion refused), nodes out
of order, fixed input shapes, the default domain spelled "ai.onnx",
normalizations onnx does not shape, old ops (Dropout before opset 10,
Reshape-1, Crop) and optional outputs nothing reads (issues 13, 17)."""

import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from perfseer_rt import extract
from perfseer_rt.errors import GraphError, LimitError, ShapeError
from perfseer_rt.graph import layout
from perfseer_rt.graph.extract import FIXED_SHAPES_WARNING
from tests.contrib_models import run_shapes
from tests.onnx_builders import const, model, single_op


def _loop_model(trips):
    """y = Loop(M, cond, x) with a body y = x @ w (w from the outer scope)."""
    f = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("MatMul", ["x_in", "w"], ["x_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", f, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", f, None)])
    inits = [const("w", (64, 64)), const("c", (), True, dtype=np.bool_)]
    ins = [("x", [8, 64])]
    if trips is None:
        ins.append(("M", [], TensorProto.INT64))
    else:
        inits.append(const("M", (), trips, dtype=np.int64))
    nodes = [helper.make_node("Loop", ["M", "c", "x"], ["y"], body=body)]
    return model(nodes, ins, [("y", None)], inits)


def test_loop_with_static_trip_count_multiplies_its_body():
    g = extract(_loop_model(10))
    assert g.node_ops == ["Loop"]
    assert g.globals["flops_total"] == 10 * 2 * 8 * 64 * 64
    assert g.warnings == [FIXED_SHAPES_WARNING]  # no note on the loop


def test_loop_with_unknown_trip_count_assumes_one_and_says_so():
    g = extract(_loop_model(None))
    assert g.globals["flops_total"] == 2 * 8 * 64 * 64
    assert any("trip count unknown" in w and "assumed 1" in w for w in g.warnings)


def test_if_costs_the_heavier_branch_and_flags_it(monkeypatch):
    f = TensorProto.FLOAT
    then = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", f, [8, 64])])
    other = helper.make_graph([helper.make_node("Relu", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", f, [8, 64])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    m = model(nodes, [("x", [8, 64])], [("y", None)], [const("w", (64, 64)), const("zero", (), 0.0)])
    g = extract(m)  # the If does most of the work: extracted as its heavier branch
    flops = dict(zip(g.node_ops, g.node_column("flops")))
    assert "If" not in flops and flops["MatMul"] == 2 * 8 * 64 * 64
    assert any("of the model's work" in w and "(then_branch)" in w for w in g.warnings)
    monkeypatch.setattr(sys.modules["perfseer_rt.graph.extract"], "DOMINANT_IF_SHARE", 2.0)
    g = extract(m)  # an If kept whole is costed as its heavier branch
    flops = dict(zip(g.node_ops, g.node_column("flops")))
    assert flops["If"] == 2 * 8 * 64 * 64
    assert any("heavier branch (then_branch" in w for w in g.warnings)


def _block_calls(n_calls: int, functions: bool) -> onnx.ModelProto:
    """``n_calls`` MatMul+Relu blocks on a [1, 64] activation, as calls of a
    model-local function (how torch's dynamo exporter keeps modules) or
    written out."""
    body = [helper.make_node("MatMul", ["a", "w"], ["b"]), helper.make_node("Relu", ["b"], ["c"])]
    nodes, prev = [], "x"
    for i in range(n_calls):
        if functions:
            nodes.append(helper.make_node("Block", [prev, "W"], [f"h{i}"], domain="local"))
        else:
            nodes += [helper.make_node("MatMul", [prev, "W"], [f"m{i}"]),
                      helper.make_node("Relu", [f"m{i}"], [f"h{i}"])]
        prev = f"h{i}"
    m = model(nodes, [("x", [1, 64])], [(prev, None)], [const("W", (64, 64))],
              domains=("local",) if functions else ())
    if functions:
        m.functions.append(helper.make_function("local", "Block", ["a", "w"], ["c"], body,
                                                [helper.make_opsetid("", 18)]))
    return m


def test_model_local_functions_are_inlined_and_costed():
    m = _block_calls(3, functions=True)
    before = m.SerializeToString()
    g, plain = extract(m), extract(_block_calls(3, functions=False))
    assert g.node_ops == plain.node_ops == ["MatMul", "Relu"] * 3
    assert not g.unknown_ops
    np.testing.assert_array_equal(g.x, plain.x)
    np.testing.assert_array_equal(g.u, plain.u)
    assert g.globals["flops_total"] == 3 * (64 * 64 * 2 + 64) > 0
    assert m.SerializeToString() == before  # the caller's model is not changed


def test_functions_that_recurse_or_multiply_past_the_node_cap_are_refused():
    rec = _block_calls(1, functions=True)
    rec.functions[0].node.append(helper.make_node("Block", ["c", "w"], ["d"], domain="local"))
    rec.functions[0].opset_import.append(helper.make_opsetid("local", 1))
    with pytest.raises(GraphError, match="'Block' calls itself"):
        extract(rec)
    # F_k calls F_(k-1) twice: 2^30 nodes once inlined, counted without inlining
    fns = [helper.make_function("local", "F0", ["a"], ["c"], [helper.make_node("Relu", ["a"], ["c"])],
                                [helper.make_opsetid("", 18)])]
    for k in range(1, 31):
        fns.append(helper.make_function(
            "local", f"F{k}", ["a"], ["c"],
            [helper.make_node(f"F{k - 1}", ["a"], ["b"], domain="local"),
             helper.make_node(f"F{k - 1}", ["b"], ["c"], domain="local")],
            [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)]))
    big = model([helper.make_node("F30", ["x"], ["y"], domain="local")], [("x", [1, 4])], [("y", None)],
                domains=("local",))
    big.functions.extend(fns)
    t0 = time.process_time()
    with pytest.raises(LimitError, match="functions inlined it has more than"):
        extract(big)
    assert time.process_time() - t0 < 5  # refused from the count: nothing was expanded


def test_nodes_out_of_order_are_sorted_and_a_cycle_is_named():
    ordered = _block_calls(3, functions=False)
    shuffled = onnx.ModelProto()
    shuffled.CopyFrom(ordered)
    nodes = list(ordered.graph.node)[::-1]  # onnxruntime runs this order too
    del shuffled.graph.node[:]
    shuffled.graph.node.extend(nodes)
    g, want = extract(shuffled), extract(ordered)
    assert g.node_ops == want.node_ops
    np.testing.assert_array_equal(g.x, want.x)
    np.testing.assert_array_equal(g.edge_index, want.edge_index)
    cyc = model([helper.make_node("Add", ["x", "b"], ["a"], name="add"),
                 helper.make_node("Relu", ["a"], ["b"], name="relu")], [("x", [1, 4])], [("b", None)])
    with pytest.raises(GraphError, match="has a cycle .*'add'"):
        extract(cyc)


def test_fixed_input_shapes_are_read_and_flagged():
    """onnxruntime plans CPU memory differently when every shape is known
    (reports/cpu-amd-epyc-1t/model_kinds.md): a model whose inputs are all fixed says so; the
    same model with a dynamic batch axis does not."""
    fixed = extract(single_op("Relu", [2, 4]))
    dynamic = extract(single_op("Relu", ["N", 4]), batch=2)
    assert fixed.info["fixed_input_shapes"] and not dynamic.info["fixed_input_shapes"]
    assert FIXED_SHAPES_WARNING in fixed.warnings and FIXED_SHAPES_WARNING not in dynamic.warnings
    np.testing.assert_array_equal(fixed.x, dynamic.x)  # the features do not see it


def test_the_default_domain_spelled_ai_onnx_is_the_default_domain():
    """ONNX lets a file name the default domain "ai.onnx" (nodes and opset
    import); onnxruntime runs such a model as the usual spelling, and
    extraction gave its Conv and Relu no cost rule (a third of the FLOPs).
    Every array is now equal to the usual spelling's."""
    def conv_relu(domain):
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], domain=domain),
                 helper.make_node("Relu", ["c"], ["y"], domain=domain)]
        m = model(nodes, [("x", ["N", 3, 32, 32])], [("y", None)], [const("w", (8, 3, 3, 3))])
        m.opset_import[0].domain = domain
        return m
    usual, spelled = extract(conv_relu(""), batch=2), extract(conv_relu("ai.onnx"), batch=2)
    assert not spelled.warnings
    for a in ("x", "edge_attr", "edge_index", "u"):
        np.testing.assert_array_equal(getattr(spelled, a), getattr(usual, a))


@pytest.mark.parametrize("op, opset, n_scale", [("GroupNormalization", 18, 2),
                                                  ("GroupNormalization", 21, 4),
                                                  ("MeanVarianceNormalization", 13, 0)])
@pytest.mark.parametrize("local_function", [False, True])
def test_normalizations_onnx_does_not_shape_are_shaped_like_their_input(op, opset, n_scale,
                                                                       local_function):
    """onnx's schemas of GroupNormalization (diffusion UNets) and
    MeanVarianceNormalization have no shape inference: both failed to
    extract ("could not be inferred"). Their outputs are shaped like their
    input, as onnxruntime runs them, in the Python pass and (with an unused
    model-local function, which that pass leaves to onnx) in onnx's."""
    extra = ["sc", "b"] if n_scale else []
    attrs = {"num_groups": 2} if n_scale else {}
    m = model([helper.make_node(op, ["x", *extra], ["n"], **attrs), helper.make_node("Relu", ["n"], ["y"])],
              [("x", [2, 4, 3, 5])], [("y", None)], [const(e, (n_scale,)) for e in extra], opset=opset)
    if local_function:
        m.opset_import.add(domain="local", version=1)
        m.functions.append(helper.make_function("local", "Unused", ["a"], ["c"],
                                                [helper.make_node("Relu", ["a"], ["c"])],
                                                [helper.make_opsetid("", opset)]))
    g = extract(m)
    want = run_shapes(m, {"x": np.ones((2, 4, 3, 5), np.float32)})
    assert dict(zip(g.edge_tensors, map(tuple, g.edge_shapes)))["n"] == want["n"] == (2, 4, 3, 5)
    assert not g.unknown_ops and not g.warnings[1:]  # at most the fixed-shapes warning


def test_an_if_whose_other_branch_cannot_run_at_these_shapes_is_its_runnable_branch():
    """silero-vad's ONNX file: an If on the sample rate holds the whole
    model, one branch per rate, and only the 16 kHz branch follows from a
    512-sample frame (in the 8 kHz one a 256-wide tensor meets it). The If
    was costed 0 ("a branch could not be costed"); it is now the branch that
    runs, as onnxruntime runs it with that branch taken."""
    def branch(tag: str, frame: int, nodes: list, inits: list) -> onnx.GraphProto:
        shape = numpy_helper.from_array(np.array([-1, frame], np.int64), f"s{tag}")
        return helper.make_graph([helper.make_node("Reshape", ["x", f"s{tag}"], [f"r{tag}"]), *nodes],
                                 tag, [], [helper.make_tensor_value_info(f"y{tag}", TensorProto.FLOAT, None)],
                                 [shape, *inits])
    then = branch("t", 512, [helper.make_node("MatMul", ["rt", "w"], ["yt"])], [])
    other = branch("e", 256, [helper.make_node("Add", ["re", "bias"], ["ye"])],
                   [numpy_helper.from_array(np.ones((2, 256), np.float32), "bias")])
    node = helper.make_node("If", ["is16k"], ["y"], then_branch=then, else_branch=other)
    m = model([node, helper.make_node("Relu", ["y"], ["z"])],
              [("x", ["N", "S"]), ("is16k", [], TensorProto.BOOL)], [("z", None)], [const("w", (512, 64))])
    g = extract(m, batch=2, dims={"S": 512})
    assert g.u[layout.GLOBAL_COLUMNS.index("flops_total")] >= 2 * 2 * 512 * 64
    assert any("the only branch whose shapes follow from these input shapes (then_branch)" in w
               for w in g.warnings)
    ran = run_shapes(m, {"x": np.ones((2, 512), np.float32), "is16k": np.array(True)})
    assert dict(zip(g.edge_tensors, map(tuple, g.edge_shapes)))["y"] == ran["y"] == (2, 64)


@pytest.mark.parametrize("opset,ir", [(9, 3), (9, 7), (7, 3)])
def test_an_old_dropouts_mask_is_shaped_like_its_input(opset, ir):
    """Dropout before opset 10 (the ONNX Model Zoo's Caffe2 AlexNet, VGG,
    SqueezeNet, Inception-v1 write its mask): onnx's inference leaves the mask
    open, and extraction failed on a model onnxruntime runs."""
    m = model([helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.5),
               helper.make_node("Relu", ["y"], ["z"])], [("x", ["N", 8])], [("z", None)], opset=opset)
    m.ir_version = ir
    g = extract(m, batch=3)
    drop = g.node_ops.index("Dropout")
    # output and mask, both [3, 8] of the input's float type (the schema's T before opset 10)
    assert g.node_column("num_outputs")[drop] == 2
    assert g.node_column("out_elems")[drop] == 2 * 3 * 8
    assert not any("optional output" in w for w in g.warnings)


def _bn_with_training_outputs(read_mean: bool) -> onnx.ModelProto:
    """BatchNormalization-9 listing its four training outputs (running mean and
    variance, saved mean and variance), which onnx's inference leaves open."""
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"],
                              ["y", "mean", "var", "saved_mean", "saved_var"]),
             helper.make_node("Relu", ["y"], ["z"])]
    if read_mean:
        nodes.append(helper.make_node("Neg", ["mean"], ["w"]))
    return model(nodes, [("x", ["N", 3, 4, 4])], [("z", None)],
                 [const(k, (3,), np.ones(3)) for k in "sbmv"], opset=9)


def test_optional_outputs_nothing_reads_and_nothing_shapes_are_left_out_with_a_warning():
    g = extract(_bn_with_training_outputs(read_mean=False), batch=2)
    bn = g.node_ops.index("BatchNormalization")
    assert g.node_column("num_outputs")[bn] == 1 and g.node_column("out_elems")[bn] == 2 * 3 * 16
    note = [w for w in g.warnings if "optional output" in w]
    assert len(note) == 1 and "4 optional output(s)" in note[0] and "'saved_var'" in note[0]


def test_an_unshaped_output_that_a_node_reads_still_fails_the_extraction():
    with pytest.raises(ShapeError, match="'mean'"):
        extract(_bn_with_training_outputs(read_mean=True), batch=2)


def _old_op(node: onnx.NodeProto, opset: int) -> onnx.ModelProto:
    m = model([node, helper.make_node("Identity", ["y"], ["z"])], [("x", [2, 3, 8, 8])], [("z", None)],
              opset=opset)
    m.ir_version = 3
    return m


@pytest.mark.parametrize("node,opset", [
    (helper.make_node("Reshape", ["x"], ["y"], shape=[2, -1]), 1),
    (helper.make_node("Reshape", ["x"], ["y"], shape=[0, 0, -1]), 4),
    (helper.make_node("Crop", ["x"], ["y"], border=[1, 2, 3, 1]), 8),
    (helper.make_node("Crop", ["x"], ["y"], border=[1, 2, 0, 0], scale=[4, 5]), 8),
], ids=["Reshape-1", "Reshape-1 copying dims", "Crop by borders", "Crop to a scale"])
def test_old_ops_that_onnxruntime_runs_take_its_shapes(node, opset):
    """Reshape-1 (its target an attribute, which onnx's inference does not read)
    and the removed experimental Crop, which old ONNX files hold: extraction
    failed on the first and guessed the second shaped like its input."""
    m = _old_op(node, opset)
    g = extract(m)
    ran = run_shapes(m, {"x": np.zeros((2, 3, 8, 8), np.float32)})
    assert g.unknown_ops == [] and g.edge_shapes[g.edge_tensors.index("y")] == tuple(ran["y"])
