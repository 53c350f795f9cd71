"""Extractor robustness: validation before arithmetic, typed errors only,
bounded time, nothing written, tied weights counted once (issues 13, 17)."""

import os
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from perfseer_rt import extract
from perfseer_rt.errors import GraphError, LimitError, PerfSeerError, ShapeError
from perfseer_rt.graph import dtypes, layout
from perfseer_rt.graph.extract import EXTERNAL_WEIGHTS_WARNING, FIXED_SHAPES_WARNING
from perfseer_rt.graph.limits import MAX_BATCH
from tests.contrib_models import run_shapes
from tests.onnx_builders import const, model, single_op


def _add_with_weight(dtype=TensorProto.FLOAT):
    return single_op("Add", [1, 4], inits=[const("w", (1, 4))], extra_inputs=["w"])


def test_name_that_is_not_utf8_is_a_graph_error():
    data = single_op("Relu", [1, 4]).SerializeToString().replace(b"\n\x01x", b"\n\x01\xfe")
    data = data.replace(b"\x01x", b"\x01\xfe")
    with pytest.raises(GraphError, match="not valid UTF-8"):
        extract(data)


def test_a_symbolic_dim_name_that_is_not_utf8_is_a_graph_error():
    """Fuzz seed 22 case 102: protobuf hands such a name back as bytes, and
    listing the unresolved dims compared it with str (an internal error)."""
    data = single_op("Relu", ["N", "seqZ"]).SerializeToString().replace(b"seqZ", b"seq\xff")
    with pytest.raises(GraphError, match="dim 1: its symbolic name is not valid UTF-8"):
        extract(data, batch=2)


def test_strings_attribute_is_read_without_failing():
    """A STRINGS attribute (a ValueError once): on a custom op it is carried
    and ignored; on a standard op without it, the node is refused as
    onnxruntime refuses it (one typed error)."""
    custom = model([helper.make_node("MyOp", ["x"], ["y"], domain="com.example",
                                     labels=[b"a", b"\xff"])],
                   [("x", [1, 4])], [("y", None)], domains=("com.example",))
    assert extract(custom).unknown_ops == ["MyOp"]
    m = single_op("Relu", [1, 4])
    m.graph.node[0].attribute.append(helper.make_attribute("labels", [b"a", b"\xff"]))
    with pytest.raises(GraphError, match="Relu .opset 18. has no attribute 'labels'"):
        extract(m)


def test_an_attribute_the_op_lacks_is_refused_before_onnx_reads_it():
    """Fuzzing found a Constant given perm=2^40 on which onnx's shape
    inference took over 20 GB; onnxruntime refuses any such node."""
    m = single_op("Relu", [1, 4])
    m.graph.node.insert(0, helper.make_node("Constant", [], ["c"], perm=1 << 40,
                                            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])))
    with pytest.raises(GraphError, match="Constant .opset 18. has no attribute 'perm'"):
        extract(m)


@pytest.mark.parametrize("elem,message", [(99, "unknown element type 99"),
                                          (TensorProto.STRING, "STRING tensor"),
                                          (0, "no element type")])
def test_bad_initializer_dtype(elem, message):
    m = _add_with_weight()
    m.graph.initializer[0].data_type = elem
    with pytest.raises(GraphError, match=message):
        extract(m)


def test_undefined_input_type_feeding_matmul_is_an_error_not_a_hang():
    m = single_op("MatMul", [1, 4], inits=[const("w", (4, 4))], extra_inputs=["w"])
    m.graph.input[0].type.tensor_type.elem_type = 0
    t0 = time.process_time()
    with pytest.raises(GraphError, match="input 'x' has no element type"):
        extract(m)
    assert time.process_time() - t0 < 2


def test_every_onnx_dtype_has_a_size():
    for name, number in TensorProto.DataType.items():
        if name in ("UNDEFINED", "STRING"):
            continue
        assert number in dtypes.DTYPES, name
    assert dtypes.itemsize(TensorProto.INT4) == 0.5
    assert dtypes.itemsize(TensorProto.BFLOAT16) == 2
    assert dtypes.itemsize(TensorProto.FLOAT8E4M3FN) == 1


def test_int4_weights_cost_half_a_byte_each():
    w = helper.make_tensor("w", TensorProto.INT4, [8, 4], np.zeros(32, dtype=np.int8).tolist())
    nodes = [helper.make_node("DequantizeLinear", ["w", "s"], ["wf"]),
             helper.make_node("MatMul", ["x", "wf"], ["y"])]
    m = model(nodes, [("x", [1, 8])], [("y", None)],
              [w, const("s", (), 0.5)], opset=21)
    g = extract(m)
    assert g.node_ops == ["DequantizeLinear", "MatMul"]  # not folded: int4 stays int4
    assert g.globals["weight_total"] == 32 * 0.5  # scale and zero point are parameters
    assert g.info["dtype"] == "int4"


def test_huge_pads_are_refused_not_infinite():
    m = single_op("Conv", [1, 3, 8, 8], inits=[const("w", (4, 3, 3, 3))], extra_inputs=["w"],
                  attrs={"pads": [2**31] * 4})
    with pytest.raises(GraphError, match="limit|outside"):
        extract(m)


def test_negative_conv_pads_and_zero_group_are_refused():
    for attrs, msg in (({"pads": [-1, -1, -1, -1]}, "pads"), ({"group": 0}, "group")):
        m = single_op("Conv", [1, 3, 8, 8], inits=[const("w", (4, 3, 3, 3))],
                      extra_inputs=["w"], attrs=attrs)
        with pytest.raises(PerfSeerError, match=msg):
            extract(m)


def test_negative_initializer_dim_is_refused():
    m = _add_with_weight()
    m.graph.initializer[0].dims[1] = -1
    with pytest.raises(GraphError, match="negative dim"):
        extract(m)


@pytest.mark.parametrize("batch", [0, -3, MAX_BATCH + 1, 2**40, 2.5, True])
def test_batch_out_of_range(batch):
    with pytest.raises(ShapeError, match="batch"):
        extract(single_op("Relu", ["N", 4]), batch=batch)


def test_constant_of_shape_is_not_materialised_per_batch():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["c"]),
             helper.make_node("Add", ["x", "c"], ["y"])]
    m = model(nodes, [("x", ["N", 1024, 1024])], [("y", None)])
    t0 = time.process_time()
    g = extract(m, batch=MAX_BATCH)
    assert time.process_time() - t0 < 2
    assert g.globals["flops_total"] == MAX_BATCH * 1024 * 1024


def test_node_cap_and_time_limit_are_typed_errors():
    m = single_op("Relu", [1, 4])
    with pytest.raises(LimitError, match="node cap"):
        extract(m, max_nodes=0)
    with pytest.raises(LimitError, match="time limit"):
        extract(m, time_limit=-1)


def test_nothing_written_and_no_symbolic_fallback(tmp_path, monkeypatch):
    """A model whose shapes onnx cannot infer: a clear error, no file in the
    working directory, onnxruntime's symbolic inference not imported."""
    monkeypatch.chdir(tmp_path)
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    m = model(nodes, [("x", ["N", 4]), ("shape", [2], TensorProto.INT64)], [("y", None)])
    before = "onnxruntime.tools.symbolic_shape_infer" in sys.modules
    with pytest.raises(ShapeError, match="could not be inferred"):
        extract(m)
    assert os.listdir(tmp_path) == []
    assert ("onnxruntime.tools.symbolic_shape_infer" in sys.modules) == before


def test_all_unresolved_dims_listed_at_once_and_dims_resolve_them():
    nodes = [helper.make_node("Concat", ["past", "new"], ["kv"], axis=2)]
    m = model(nodes, [("past", ["batch", 4, "past_seq", 8]), ("new", ["batch", 4, "seq", 8])],
              [("kv", None)])
    with pytest.raises(ShapeError) as err:
        extract(m)
    msg = str(err.value)
    assert "2 input dim(s)" in msg and "'past_seq'" in msg and "'seq'" in msg
    assert "--dim past_seq=N --dim seq=N" in msg
    g = extract(m, dims={"batch": 3, "past_seq": 0, "seq": 5})
    assert g.input_shapes == {"past": (3, 4, 0, 8), "new": (3, 4, 5, 8)}
    assert g.globals["batch_size"] == 3
    with pytest.raises(ShapeError, match="outside"):
        extract(m, dims={"seq": -1, "past_seq": 1})


def _weights_as_inputs():
    """A structure-only export: fc.weight / fc.bias are graph inputs."""
    nodes = [helper.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["y"], transB=1)]
    return model(nodes, [("x", ["N", 512]), ("fc.weight", [1000, 512]), ("fc.bias", [1000])],
                 [("y", None)])


def test_weights_given_as_graph_inputs_are_weights():
    g = extract(_weights_as_inputs(), batch=8)
    assert g.globals["params_total"] == 1000 * 512 + 1000
    assert g.globals["weight_total"] == 4 * (1000 * 512 + 1000)
    assert g.input_shapes["x"] == (8, 512)
    assert g.info["weight_inputs"] == ["fc.bias", "fc.weight"]
    assert any("used as weights" in w for w in g.warnings)
    # the same model with initializers gives the same features
    m = _weights_as_inputs()
    del m.graph.input[1:]
    m.graph.initializer.extend([const("fc.weight", (1000, 512)), const("fc.bias", (1000,))])
    ref = extract(m, batch=8)
    np.testing.assert_array_equal(ref.x, g.x)
    np.testing.assert_array_equal(ref.u, g.u)


def test_tied_weights_counted_once():
    """ALBERT-style: one layer's weight feeds three MatMuls."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h1"]),
             helper.make_node("MatMul", ["h1", "w"], ["h2"]),
             helper.make_node("MatMul", ["h2", "w"], ["y"])]
    m = model(nodes, [("x", [2, 64])], [("y", None)], [const("w", (64, 64))])
    g = extract(m)
    assert g.globals["params_total"] == 64 * 64
    assert g.globals["weight_total"] == 4 * 64 * 64
    assert g.node_column("params").sum() == 3 * 64 * 64  # each node still reads it
    assert g.info["shared_weights"] == 1
    assert g.info["shared_weight_bytes"] == 4 * 64 * 64
    assert any("shared by several nodes" in w for w in g.warnings)
    untied = model(nodes[:1] + [helper.make_node("MatMul", ["h1", "w2"], ["h2"]),
                                helper.make_node("MatMul", ["h2", "w3"], ["y"])],
                   [("x", [2, 64])], [("y", None)],
                   [const("w", (64, 64)), const("w2", (64, 64)), const("w3", (64, 64))])
    u = extract(untied)
    assert u.globals["params_total"] == 3 * 64 * 64
    assert u.info["shared_weights"] == 0 and u.warnings == [FIXED_SHAPES_WARNING]


def test_weights_shared_through_identity_and_transpose_counted_once():
    """How real exports share a weight: the exporter deduplicates equal
    tensors (HF ALBERT's shared layers; timm's zero-initialised convolutions
    after BatchNorm folding) into ``Identity`` nodes, or a layer reads a
    transposed copy. onnxruntime holds one copy (the ALBERT-base export holds
    11.1 M unique elements, measured resident 45.9 MiB, while counting per
    user gave 89 M), so ``params_total`` counts the weight once."""
    nodes = [helper.make_node("Identity", ["w"], ["w_a"]),
             helper.make_node("Identity", ["w_a"], ["w_b"]),  # a chain of aliases
             helper.make_node("Transpose", ["w"], ["w_t"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "w_a"], ["h1"]),
             helper.make_node("MatMul", ["h1", "w_b"], ["h2"]),
             helper.make_node("MatMul", ["h2", "w_t"], ["h3"]),
             helper.make_node("MatMul", ["h3", "v"], ["y"])]
    m = model(nodes, [("x", [2, 64])], [("y", None)], [const("w", (64, 64)), const("v", (64, 64))])
    g = extract(m)
    assert g.num_nodes == 4  # the aliases fold away
    assert g.globals["params_total"] == 2 * 64 * 64
    assert g.globals["weight_total"] == 4 * 2 * 64 * 64
    assert g.info["shared_weights"] == 1
    assert any("3 uses" in w for w in g.warnings)
    # a weight computed from two constants is a new tensor, not an alias
    nodes[2] = helper.make_node("Add", ["w", "v"], ["w_t"])
    g2 = extract(model(nodes, [("x", [2, 64])], [("y", None)],
                       [const("w", (64, 64)), const("v", (64, 64))]))
    assert g2.globals["params_total"] == 3 * 64 * 64


def test_constants_computed_from_shapes_are_not_weights():
    """What exporters build from the input's shape (MViTv2's ScatterND
    indices expanded to the batch, attention masks, position ids) folds to
    a constant once the batch is known, but the runtime computes it on every
    call: it reads as a constant input of its node, yet it is no weight, and
    the model's weights do not grow with the batch."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["ones"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
             helper.make_node("Add", ["x", "ones"], ["h"]),
             helper.make_node("MatMul", ["h", "w"], ["y"])]
    m = model(nodes, [("x", ["batch", 64])], [("y", None)], [const("w", (64, 64))])
    for batch in (1, 8):
        g = extract(m, batch=batch)
        assert g.num_nodes == 2
        assert g.globals["params_total"] == 64 * 64
        assert g.globals["weight_total"] == 4 * 64 * 64
        assert g.node_column("params").sum() == 64 * 64 + batch * 64  # the Add still reads it


def test_fp16_model_is_flagged():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    m = model(nodes, [("x", [2, 64], TensorProto.FLOAT16)], [("y", None)],
              [const("w", (64, 64), dtype=np.float16)])
    g = extract(m)
    assert g.info["dtype"] == "float16"
    assert g.globals["weight_total"] == 2 * 64 * 64
    assert any("float16" in w for w in g.warnings)


def test_integer_matmul_gets_matmul_cost():
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["y"])]
    m = model(nodes, [("x", [4, 64])], [("y", None)],
              [const("w", (64, 32), dtype=np.int8), const("wz", (), 0, dtype=np.int8)])
    g = extract(m)
    flops = dict(zip(g.node_ops, g.node_column("flops")))
    assert flops["MatMulInteger"] == 2 * 4 * 32 * 64
    assert flops["DynamicQuantizeLinear"] == 5 * 4 * 64
    assert g.unknown_ops == []
    assert g.globals["weight_total"] == 64 * 32  # int8 weight; zero points are parameters


def test_features_are_checked_finite_and_non_negative():
    from perfseer_rt.graph.perfgraph import PerfGraph
    g = extract(single_op("Relu", [1, 4]))
    bad = g.x.copy()
    bad[0, 0] = -1
    with pytest.raises(GraphError, match="negative or non-finite"):
        PerfGraph(g.node_names, g.node_ops, bad, g.edge_index, g.edge_attr,
                  g.edge_tensors, g.edge_shapes, g.u)


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


def test_cli_dim_option_and_typed_errors_exit_2(tmp_path):
    from click.testing import CliRunner

    from perfseer_rt.cli import main
    nodes = [helper.make_node("Relu", ["ids"], ["y"])]
    p = tmp_path / "dyn.onnx"
    onnx.save(model(nodes, [("ids", ["B", "S"])], [("y", None)]), p)
    runner = CliRunner()
    ok = runner.invoke(main, ["inspect", str(p), "--batch", "2", "--dim", "S=16"])
    assert ok.exit_code == 0 and "ids 2x16" in ok.output
    for args, msg in ((["--dim", "S"], "expected NAME=VALUE"), (["--dim", "S=-2"], "NAME=VALUE"),
                      (["--batch", "70000", "--dim", "S=1"], "outside the supported range"),
                      (["--dim", "S=16", "--dim", "S=8"], "--dim S given twice with different values"),
                      (["--input", "ids:2x16", "--input", "ids:2x8"],
                       "--input ids given twice with different shapes (2x16 and 2x8)")):
        res = runner.invoke(main, ["extract", str(p), "--json", *args])
        assert res.exit_code == 2, res.output
        assert msg in res.output and "Traceback" not in res.output
    bad = _add_with_weight()
    bad.graph.initializer[0].data_type = 99
    q = tmp_path / "bad.onnx"
    onnx.save(bad, q)
    res = runner.invoke(main, ["extract", str(q)])
    assert res.exit_code == 2 and "unknown element type 99" in res.output


def test_structure_only_export_with_weights_as_inputs_matches_initializers():
    """ResNet-18 with every external weight turned into a graph input (incl.
    the Identity-aliased biases torch shares): same features, --batch works."""
    from pathlib import Path
    m = onnx.load(str(Path(__file__).parents[1] / "examples" / "resnet18.onnx"),
                  load_external_data=False)
    ref = extract(m, batch=4)
    inits = list(m.graph.initializer)
    del m.graph.initializer[:]
    for t in inits:
        if t.data_location == TensorProto.EXTERNAL:
            m.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            m.graph.initializer.append(t)
    g = extract(m, batch=4)
    assert len(g.info["weight_inputs"]) == sum(t.data_location == TensorProto.EXTERNAL for t in inits)
    np.testing.assert_array_equal(g.x, ref.x)
    np.testing.assert_array_equal(g.u, ref.u)


def _long_bias_model() -> onnx.ModelProto:
    """Fuzz seed 1 case 3858, reduced: a 2^31-long 1-D bias without data
    added to a tensor whose shape onnx cannot infer (the fuzz case's
    MatMul read a tensor nothing defines, now refused before inference: a
    data-dependent NonZero stands in for it)."""
    bias = TensorProto(name="bias", data_type=TensorProto.FLOAT, dims=[2**31 - 1],
                       data_location=TensorProto.EXTERNAL)
    bias.external_data.add(key="location", value="absent.bin")
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("NonZero", ["r"], ["nz"]),
             helper.make_node("Cast", ["nz"], ["nowhere"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["nowhere", "r"], ["mm"]),
             helper.make_node("Add", ["bias", "mm"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [bias])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_long_1d_tensor_skips_onnx_data_propagation(monkeypatch):
    """onnx's data propagation allocates one dim per element of a 1-D
    tensor (5 GB for this one); such skeletons are inferred without it."""
    import onnx.shape_inference as si

    used = []
    real = si.infer_shapes
    monkeypatch.setattr(si, "infer_shapes",
                        lambda m, **kw: used.append(kw["data_prop"]) or real(m, **kw))
    with pytest.raises(PerfSeerError):
        extract(_long_bias_model())
    assert used and not any(used)


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


def test_weights_in_an_external_file_are_read_and_flagged(tmp_path):
    """onnxruntime holds no copy of external weights while it creates the
    session (reports/cpu-amd-epyc-1t/model_kinds.md): a model whose weights sit in a
    data file beside it says so; the same model given as bytes, or
    structure-only (its data file absent), does not, and the features are
    the same."""
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Add", ["y", "b"], ["z"])],
              [("x", ["N", 64])], [("z", None)], [const("w", (64, 64)), const("b", (64,))])
    onnx.save(m, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data",
              size_threshold=1024)  # w (16 KiB) external, b (256 bytes) inline
    ext = extract(tmp_path / "m.onnx", batch=2)
    share = 64 * 64 / (64 * 64 + 64)
    assert ext.info["external_weight_share"] == pytest.approx(share)
    assert EXTERNAL_WEIGHTS_WARNING.format(share=share) in ext.warnings
    as_bytes = extract((tmp_path / "m.onnx").read_bytes(), batch=2)
    (tmp_path / "m.data").unlink()
    structure_only = extract(tmp_path / "m.onnx", batch=2)
    for g in (as_bytes, structure_only):
        assert g.info["external_weight_share"] == 0.0
        assert not any("external data" in w for w in g.warnings)
        np.testing.assert_array_equal(g.x, ext.x)


@pytest.mark.parametrize("location, why", [
    ("", "names no file"), ("/dev/zero", "absolute path"), ("../outside.bin", "outside the model's folder"),
    ("a_folder", "not a regular file"), ("a_pipe", "not a regular file")])
def test_external_data_onnxruntime_refuses_is_a_typed_error(tmp_path, location, why):
    """An external data location onnxruntime refuses (none, absolute, out of
    the model's folder, a folder or a named pipe there) is one GraphError
    naming the initializer; the pipe is never opened (opening it would
    block), and a location within the folder that goes out and back in is
    read as onnxruntime reads it."""
    (tmp_path / "model").mkdir()
    (tmp_path / "outside.bin").write_bytes(bytes(64 * 64 * 4))
    (tmp_path / "model" / "a_folder").mkdir()
    os.mkfifo(tmp_path / "model" / "a_pipe")
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", ["N", 64])], [("y", None)],
              [const("w", (64, 64))])
    w = m.graph.initializer[0]
    w.ClearField("raw_data")
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value=location)
    onnx.save(m, str(tmp_path / "model" / "m.onnx"))
    with pytest.raises(GraphError, match=f"initializer 'w'.*{why}"):
        extract(tmp_path / "model" / "m.onnx", batch=2)
    (tmp_path / "model" / "w.bin").write_bytes(bytes(64 * 64 * 4))
    w.external_data[0].value = "a_folder/../w.bin"
    onnx.save(m, str(tmp_path / "model" / "back.onnx"))
    assert extract(tmp_path / "model" / "back.onnx", batch=2).info["external_weight_share"] == 1.0


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


def test_tensors_nothing_defines_are_typed_errors_naming_them():
    """onnxruntime refuses a model whose node reads, or whose graph
    outputs, a tensor that no node, graph input or initializer defines, and
    one that declares a graph input twice. Extraction had taken the first
    for a shape it could not infer (advising --input) and not seen the
    others; each is now one GraphError naming the tensor. A subgraph may
    read its outer graph's tensors (the If test elsewhere)."""
    conv = helper.make_node("Conv", ["x", "w"], ["c"])
    cases = {
        "reads": ([conv, helper.make_node("Add", ["c", "nowhere"], ["y"], name="add")], ["y"], 1,
                  "node 'add' reads 'nowhere', which no node"),
        "outputs": ([conv, helper.make_node("Relu", ["c"], ["y"])], ["y", "ghost"], 1,
                    "graph output 'ghost' is defined by no node"),
        "inputs twice": ([conv, helper.make_node("Relu", ["c"], ["y"])], ["y"], 2,
                         "graph input 'x' is declared twice"),
    }
    for nodes, outs, n_inputs, msg in cases.values():
        m = model(nodes, [("x", ["N", 3, 8, 8])] * n_inputs, [(o, None) for o in outs],
                  [const("w", (4, 3, 3, 3))])
        with pytest.raises(GraphError, match=msg):
            extract(m, batch=2)


@pytest.mark.parametrize("w_shape, attrs, msg", [
    ((8, 4, 3, 3), {"group": 3}, "input has 4 channels where its weight, 8 filters of 4 channels in 3"),
    ((8, 5, 3, 3), {}, "input has 4 channels where its weight, 8 filters of 5 channels in 1"),
    ((8, 4, 3, 3), {"kernel_shape": [5, 5]}, r"kernel_shape \[5, 5\] is not its weight's \[3, 3\]"),
    ((8, 4, 9, 9), {}, r"output would be \[2, 8, 0, 0\]")])
def test_a_conv_its_input_does_not_fit_is_a_shape_error(w_shape, attrs, msg):
    """onnx's shape inference lets a Conv through whose input channels are
    not its weight's times its groups, whose kernel_shape is not its
    weight's, or whose output has no pixels; onnxruntime refuses each when
    it runs, and extraction had costed them. Grouped and depthwise
    convolutions that fit, and one with no filters (onnxruntime runs it),
    extract."""
    def conv(w, **kw):
        return model([helper.make_node("Conv", ["x", "w"], ["y"], name="c1", **kw)], [("x", ["N", 4, 8, 8])],
                     [("y", None)], [const("w", w)])
    with pytest.raises(ShapeError, match=f"node 'c1' \\(Conv\\): its {msg}"):
        extract(conv(w_shape, **attrs), batch=2)
    for w, kw in (((8, 2, 3, 3), {"group": 2}), ((4, 1, 3, 3), {"group": 4}), ((0, 4, 3, 3), {})):
        extract(conv(w, **kw), batch=2)


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


@pytest.mark.parametrize("op, attr, msg", [
    ("Conv", onnx.AttributeProto(name="kernel_shape", type=onnx.AttributeProto.FLOATS, floats=[3.0, 3.0]),
     "takes attribute 'kernel_shape' as INTS, the file gives FLOATS"),
    ("Softmax", onnx.AttributeProto(name="axis", type=onnx.AttributeProto.FLOAT, f=1.0),
     "takes attribute 'axis' as INT, the file gives FLOAT"),
    ("Transpose", onnx.AttributeProto(name="perm", type=onnx.AttributeProto.INT, i=1),
     "takes attribute 'perm' as INTS, the file gives INT"),
    ("Conv", onnx.AttributeProto(name="auto_pad", type=onnx.AttributeProto.STRING, s=b"BOGUS"),
     "auto_pad='BOGUS' is none of NOTSET, SAME_UPPER, SAME_LOWER, VALID")])
def test_an_attribute_of_another_type_or_value_than_its_schema_is_a_graph_error(op, attr, msg):
    """onnxruntime refuses an attribute whose type is not the one the op's
    schema declares (a float kernel, an int perm) and an auto_pad it does
    not know; extraction had read them as the values they looked like."""
    node = helper.make_node(op, ["x", "w"] if op == "Conv" else ["x"], ["y"])
    node.attribute.append(attr)
    m = model([node], [("x", ["N", 4, 8, 8])], [("y", None)], [const("w", (8, 4, 3, 3))] if op == "Conv" else [])
    with pytest.raises(GraphError, match=msg):
        extract(m, batch=2)


def test_a_node_without_op_type_is_a_typed_error():
    """onnxruntime refuses a node whose op_type is empty; extraction had
    guessed it shaped like its input."""
    m = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("", ["r"], ["y"], name="blank")],
              [("x", ["N", 4])], [("y", None)])
    with pytest.raises(GraphError, match="node 'blank' has no op type"):
        extract(m, batch=2)


def test_an_opset_newer_than_onnx_knows_is_a_typed_error():
    """onnxruntime refuses a model stamped with an opset it does not know;
    so does extraction, naming the domain, instead of costing its ops with
    the rules of an older opset. The newest known opset is accepted."""
    newest = onnx.defs.onnx_opset_version()
    assert extract(single_op("Relu", ["N", 4], opset=newest), batch=2).x.shape[0] == 1
    with pytest.raises(GraphError, match=f"opset {newest + 1} of domain 'ai.onnx'"):
        extract(single_op("Relu", ["N", 4], opset=newest + 1), batch=2)
    ml = single_op("Relu", ["N", 4])
    ml.opset_import.add(domain="ai.onnx.ml", version=onnx.defs.onnx_ml_opset_version() + 1)
    with pytest.raises(GraphError, match="of domain 'ai.onnx.ml'"):
        extract(ml, batch=2)


def test_empty_quantized_weights_are_no_division_by_zero():
    """Fuzz seed 17 case 5878: a float32 model whose only weight is an empty
    int8 tensor (the quantized share divided 0 by 0: an internal error)."""
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["yi"]),
             helper.make_node("Cast", ["yi"], ["y"], to=TensorProto.FLOAT)]
    m = model(nodes, [("x", [2, 32])], [("y", None)],
              [const("w", (32, 0), np.zeros((32, 0)), dtype=np.int8),
               const("wz", (), 0, dtype=np.int8)])
    g = extract(m)
    assert g.info["dtype"] == "float32" and g.info["weight_bytes_by_dtype"] == {"int8": 0}
    assert not any("quantized" in w for w in g.warnings)


def test_a_shape_of_more_dims_than_numpy_allows_is_refused():
    """Fuzz seed 20 case 2586: onnx's data propagation gave a fuzzed Swin's
    Reshape 1,048,579 dims and spent ~1.7 CPU-s a round on it (5 CPU-s in
    all); a Reshape to 100 ones here."""
    ones = helper.make_node("ConstantOfShape", ["n"], ["target"],
                            value=helper.make_tensor("one", TensorProto.INT64, [1], [1]))
    m = model([ones, helper.make_node("Reshape", ["x", "target"], ["y"])],
              [("x", [1, 1])], [("y", None)], [const("n", (1,), [100], dtype=np.int64)])
    with pytest.raises(GraphError, match="would have 100 dims .over 64."):
        extract(m)


def test_ops_a_converter_left_in_are_named_when_shapes_fail():
    """tf2onnx's Keras ConvNeXt kept TensorFlow's StatefulPartitionedCall (and
    Erfc) in the default domain: onnxruntime refuses the file, and the shape
    error said only which tensors were unresolved."""
    m = model([helper.make_node("StatefulPartitionedCall", ["x"], ["y"]),
               helper.make_node("Add", ["y", "z"], ["s"])],
              [("x", [2, 4]), ("z", [3])], [("s", None)], opset=17)
    with pytest.raises(ShapeError, match=r"not ONNX operators at its opset "
                                         r"\(StatefulPartitionedCall \(1 node\)\)"):
        extract(m)


def _malformed_dynamic_nodes():
    """Malformed nodes on the paths of data-dependent sizes, sequences and control flow."""
    f, i64, b = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL

    def vi(n, s, t=f):
        return helper.make_tensor_value_info(n, t, s)

    def mk(nodes, inputs, inits=()):
        g = helper.make_graph(nodes, "g", inputs, [vi("z", None)], initializer=list(inits))
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 9
        return m

    relu = helper.make_node("Relu", ["y"], ["z"])
    cast = helper.make_node("Cast", ["y"], ["z"], to=f)
    x, bad_branch = vi("x", [2, 3]), helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"])], "b", [], [vi("r", None)])
    short_body = helper.make_graph([helper.make_node("Identity", ["ci"], ["co"])], "b",
                                   [vi("i", [], i64), vi("ci", [], b), vi("a", None)],
                                   [vi("co", [], b)])
    return {
        "If outputs beyond its branches'": mk(
            [helper.make_node("If", ["c"], ["w", "y"], then_branch=bad_branch,
                              else_branch=bad_branch), relu], [x, vi("c", [], b)]),
        "Loop body without its scan output": mk(
            [helper.make_node("Loop", ["m", "cond", "x"], ["acc", "y"], body=short_body), relu],
            [x], [const("m", (), 3, dtype=np.int64), const("cond", (), True, dtype=np.bool_)]),
        "SequenceAt on a tensor": mk([helper.make_node("SequenceAt", ["x", "p"], ["y"]), relu], [x],
                                     [const("p", (), 0, dtype=np.int64)]),
        "TopK axis out of range": mk([helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=7), relu],
                                     [x, vi("k", [1], i64)]),
        "NonMaxSuppression of 2-D boxes": mk(
            [helper.make_node("NonMaxSuppression", ["x", "x"], ["y"]), cast], [x]),
        "Unique axis 2^40": mk([helper.make_node("Unique", ["x"], ["y"], axis=2**40), relu], [x]),
        "Compress with a 2-D condition": mk(
            [helper.make_node("Compress", ["x", "k"], ["y"]), relu], [x, vi("k", [2, 3], b)]),
        "SplitToSequence into 2^40-wide pieces": mk(
            [helper.make_node("SplitToSequence", ["x", "s"], ["q"], axis=1),
             helper.make_node("ConcatFromSequence", ["q"], ["y"], axis=0), relu], [x],
            [const("s", (), 2**40, dtype=np.int64)]),
    }


@pytest.mark.parametrize("case", list(_malformed_dynamic_nodes()))
def test_malformed_dynamic_size_nodes_extract_or_fail_typed(case):
    proto = _malformed_dynamic_nodes()[case]
    start = time.process_time()
    try:
        g = extract(proto)
    except PerfSeerError as exc:
        assert not getattr(exc, "internal", False), exc
    else:
        assert np.isfinite(g.x).all() and (g.x >= 0).all()
    assert time.process_time() - start < 5


def test_control_flow_without_its_subgraph_is_a_graph_error():
    branch = helper.make_graph([helper.make_node("Relu", ["x"], ["r"])], "b", [],
                               [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])
    m = model([helper.make_node("If", ["c"], ["y"], then_branch=branch),
               helper.make_node("Relu", ["y"], ["z"])],
              [("x", [2, 3]), ("c", [], TensorProto.BOOL)], [("z", None)], opset=17)
    with pytest.raises(GraphError, match="If has no else_branch subgraph"):
        extract(m)


@pytest.mark.parametrize("case", ["initializer", "two nodes", "graph input"])
def test_a_tensor_defined_twice_is_refused_as_onnxruntime_refuses_it(case):
    """Fuzz seed 38 case 8082: a mutated detector whose conv weight took the
    name of a shape vector; onnx's data propagation then spent 2.5 GB."""
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["y"], ["z"])]
    inputs, inits = [("x", [2])], []
    if case == "initializer":
        inits = [const("y", (2,))]
    elif case == "two nodes":
        nodes.append(helper.make_node("Abs", ["x"], ["y"]))
    else:
        inputs.append(("y", [2]))
    with pytest.raises(GraphError, match="tensor 'y' is defined twice"):
        extract(model(nodes, inputs, [("z", None)], inits))


def test_a_model_inconsistent_at_its_shapes_names_the_node_that_refuses_them():
    """An export whose shapes clash (transformers' PatchTST traced by torch:
    an Add of [B, 8, 3, 32] and [8, 32], which onnxruntime refuses to load)
    is one line naming the node and the shapes, not advice to give shapes."""
    m = model([helper.make_node("Add", ["x", "pos"], ["s"]),
               helper.make_node("Relu", ["s"], ["y"])],
              [("x", ["B", 8, 3, 32])], [("y", None)], [const("pos", (8, 32))], opset=17)
    with pytest.raises(ShapeError, match=r"node 's' \(Add\) refuses inputs of shapes "
                                         r"\[2, 8, 3, 32\], \[8, 32\]: .*inconsistent") as err:
        extract(m, batch=2)
    assert "--input" in str(err.value) and "run time" not in str(err.value)


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


@pytest.mark.parametrize("elem,name,what", [(TensorProto.FLOAT8E4M3FN, "float8e4m3fn", "narrow weights"),
                                            (TensorProto.INT8, "int8", "quantized weights")])
def test_weights_stored_narrow_in_a_float32_model_are_flagged(elem, name, what):
    """FP8 weight-only checkpoints (DequantizeLinear of float8 weights, then
    float32 compute) were flagged nowhere: only integer storage was."""
    w = helper.make_tensor("w", elem, [64, 64], vals=bytes(64 * 64), raw=True)
    m = model([helper.make_node("DequantizeLinear", ["w", "s"], ["wf"]),
               helper.make_node("MatMul", ["x", "wf"], ["y"])],
              [("x", ["N", 64])], [("y", None)], [w, const("s", (), 1.0)], opset=21)
    g = extract(m, batch=4)
    assert g.info["dtype"] == "float32"
    assert [w for w in g.warnings if "weight bytes" in w] == [
        f"100% of the weight bytes are stored as {name} ({what}, {'dequantized' if 'quant' in what else 'converted'} "
        "as the model runs in float32); perfseer-rt's shipped predictors were trained on float32 weights only"]
