"""How extraction counts and flags weights: bytes per dtype (int4 half a
byte), weights given as graph inputs, tied and aliased weights counted once,
constants computed from shapes not counted, external data files (read,
flagged, or refused as onnxruntime refuses them), float16, quantized and
narrow-stored weights flagged (issues 13, 17)."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from perfseer_rt import extract
from perfseer_rt.errors import GraphError
from perfseer_rt.graph import dtypes
from perfseer_rt.graph.extract import EXTERNAL_WEIGHTS_WARNING, FIXED_SHAPES_WARNING
from tests.onnx_builders import const, model


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
