"""Extraction pipeline: loading, shapes, folding, edges, globals, views."""

import os
import re

import networkx as nx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from perfseer_rt import PerfGraph, extract
from perfseer_rt.errors import ModelLoadError, ShapeError
from perfseer_rt.graph import extract_batches, layout
from tests.onnx_builders import const, model


def conv_chain(batch_dim="N", channels=(3, 8, 8)) -> onnx.ModelProto:
    """x -> Conv -> Relu -> Conv -> (+ relu) -> Flatten via a shape subgraph."""
    c0, c1, c2 = channels
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
        # shape subgraph: Shape -> Gather(0) -> Unsqueeze -> Concat(-1) -> Reshape
        helper.make_node("Shape", ["s"], ["shp"], name="shape"),
        helper.make_node("Constant", [], ["idx"], name="const_idx",
                         value=helper.make_tensor("v", TensorProto.INT64, [], [0])),
        helper.make_node("Gather", ["shp", "idx"], ["n"], axis=0, name="gather"),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="unsq"),
        helper.make_node("Concat", ["n1", "minus1"], ["newshape"], axis=0, name="concat"),
        helper.make_node("Reshape", ["s", "newshape"], ["y"], name="reshape"),
    ]
    inits = [const("w1", (c1, c0, 3, 3)), const("w2", (c2, c1, 3, 3)),
             const("ax0", (1,), [0], dtype=np.int64), const("minus1", (1,), [-1], dtype=np.int64)]
    return model(nodes, [("x", [batch_dim, c0, 8, 8])], [("y", [batch_dim, "F"])], inits)


def test_shape_subgraph_and_constants_are_folded():
    g = extract(conv_chain(), batch=2)
    assert g.node_ops == ["Conv", "Relu", "Conv", "Add", "Reshape"]
    # Reshape gets its data from Add; its shape input comes from folded nodes
    edges = {(g.node_names[s], g.node_names[t]) for s, t in g.edge_index.T}
    assert edges == {("conv1", "relu1"), ("relu1", "conv2"), ("conv2", "add"),
                     ("relu1", "add"), ("add", "reshape")}
    reshape = g.node_names.index("reshape")
    assert g.node_column("out_elems")[reshape] == 2 * 8 * 64
    assert g.node_column("weight")[reshape] == 0


def test_sources_agree_path_bytes_proto(tmp_path):
    m = conv_chain()
    p = tmp_path / "m.onnx"
    onnx.save(m, p)
    a = extract(p, batch=3)
    b = extract(p.read_bytes(), batch=3)
    c = extract(m, batch=3)
    d = extract(str(p), batch=3)
    for other in (b, c, d):
        np.testing.assert_array_equal(a.x, other.x)
        np.testing.assert_array_equal(a.edge_index, other.edge_index)
        np.testing.assert_array_equal(a.u, other.u)


def test_structure_only_model_matches_model_with_weights(tmp_path):
    m = conv_chain(channels=(3, 64, 64))
    full = tmp_path / "full.onnx"
    onnx.save(m, full)
    skel = tmp_path / "skel.onnx"
    onnx.save_model(m, skel, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="skel.onnx.data", size_threshold=1024)
    os.remove(tmp_path / "skel.onnx.data")
    assert skel.stat().st_size < full.stat().st_size / 10
    a, b = extract(full, batch=2), extract(skel, batch=2)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.u, b.u)
    assert b.globals["params_total"] == 64 * 3 * 9 + 64 * 64 * 9


def test_feature_arrays_follow_layout():
    g = extract(conv_chain(), batch=1)
    assert g.x.shape == (5, len(layout.NODE_COLUMNS))
    assert g.edge_attr.shape == (5, len(layout.EDGE_COLUMNS))
    assert g.u.shape == (len(layout.GLOBAL_COLUMNS),)
    assert g.feature_version == layout.FEATURE_VERSION
    onehot = g.x[:, : len(layout.OP_VOCAB) + 1]
    np.testing.assert_array_equal(onehot.sum(axis=1), np.ones(5))
    assert g.node_column("op_Conv").sum() == 2
    for col in ("flops_ratio", "mac_ratio", "weight_ratio"):
        assert g.node_column(col).sum() == pytest.approx(1.0)


def test_edge_features_and_shape_slots():
    g = extract(conv_chain(), batch=2)
    j = g.edge_tensors.index("c1")
    assert g.edge_shapes[j] == (2, 8, 8, 8)
    np.testing.assert_array_equal(g.edge_attr[j], [2 * 8 * 64, 2, 8, 8, 8, 4])
    # rank-3 transformer activation (B, S, D): channel = D, height = S
    m = model([helper.make_node("Relu", ["x"], ["a"], name="r"),
               helper.make_node("Sigmoid", ["a"], ["y"], name="s")],
              [("x", [2, 10, 32])], [("y", None)])
    g = extract(m)
    np.testing.assert_array_equal(g.edge_attr[0], [640, 2, 32, 10, 1, 4])


def test_globals_are_statistics_of_nodes():
    g = extract(conv_chain(), batch=2)
    u = g.globals
    flops = g.node_column("flops")
    assert u["num_nodes"] == 5 and u["num_edges"] == 5
    assert u["density"] == pytest.approx(5 / (5 * 4))
    assert u["flops_total"] == pytest.approx(flops.sum())
    assert u["flops_median"] == pytest.approx(np.median(flops))
    assert u["flops_max"] == pytest.approx(flops.max())
    assert u["mac_mean"] == pytest.approx(g.node_column("mac").mean())
    assert u["edge_size_mean"] == pytest.approx(g.edge_column("size").mean())
    assert u["ai_model"] == pytest.approx(u["flops_total"] / u["mac_total"])
    assert u["batch_size"] == 2


def test_batch_defaults_to_one_and_scales_activations():
    g1 = extract(conv_chain())
    g4 = extract(conv_chain(), batch=4)
    assert g1.globals["batch_size"] == 1 and g1.input_shapes == {"x": (1, 3, 8, 8)}
    assert g4.globals["flops_total"] == pytest.approx(4 * g1.globals["flops_total"])
    assert g4.globals["weight_total"] == g1.globals["weight_total"]


def test_unresolvable_dynamic_dim_names_input_and_dim():
    m = model([helper.make_node("Relu", ["ids"], ["y"])], [("ids", ["B", "seq"])], [("y", None)])
    with pytest.raises(ShapeError, match=r"input 'ids' dim 1 \('seq'\)"):
        extract(m, batch=2)
    g = extract(m, batch=2, input_shapes={"ids": (2, 128)})
    assert g.input_shapes == {"ids": (2, 128)}


def test_input_shape_errors():
    m = conv_chain(batch_dim=1)
    with pytest.raises(ShapeError, match="fixed batch dim of 1"):
        extract(m, batch=8)
    with pytest.raises(ShapeError, match="not among the model's inputs"):
        extract(m, input_shapes={"nope": (1, 3, 8, 8)})
    with pytest.raises(ShapeError, match="rank 3 given"):
        extract(m, input_shapes={"x": (1, 3, 8)})


def test_unknown_op_gets_generic_cost_and_is_reported():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"),
             helper.make_node("FancyOp", ["a"], ["b"], domain="com.example", name="fancy"),
             helper.make_node("Sigmoid", ["b"], ["y"], name="s")]
    m = model(nodes, [("x", [1, 4, 8, 8])], [("y", None)], domains=("com.example",))
    g = extract(m)
    assert g.unknown_ops == ["FancyOp"]
    k = g.node_names.index("fancy")
    assert g.node_column("op_other")[k] == 1
    assert g.node_column("flops")[k] == 256  # 1 FLOP per output element
    assert g.node_column("flops")[g.node_names.index("s")] == 4 * 256  # shape flowed on
    assert g.num_edges == 2


@pytest.mark.parametrize("data, message", [
    (b"hello, this is text", "not an ONNX model"),
    (b"", "empty file"),
])
def test_not_onnx(tmp_path, data, message):
    p = tmp_path / "bad.onnx"
    p.write_bytes(data)
    with pytest.raises(ModelLoadError, match=message):
        extract(p)


def test_truncated_and_missing(tmp_path):
    data = conv_chain().SerializeToString()
    for cut in (len(data) // 2, len(data) - 3, 40):
        p = tmp_path / f"cut{cut}.onnx"
        p.write_bytes(data[:cut])
        with pytest.raises(ModelLoadError, match="truncated or corrupt|not an ONNX"):
            extract(p)
    with pytest.raises(ModelLoadError, match="no such file"):
        extract(tmp_path / "missing.onnx")


def test_a_pipe_or_device_is_refused_without_opening_it(tmp_path):
    """A named pipe nobody writes to would block the open for ever and
    /dev/zero the read (both hung ``perfseer-rt predict``): anything that is
    not a regular file is one ModelLoadError, found by a stat; so is a
    name no file can have."""
    os.mkfifo(tmp_path / "pipe.onnx")
    for path in (tmp_path / "pipe.onnx", "/dev/zero"):
        with pytest.raises(ModelLoadError, match="not a regular file"):
            extract(path)
    with pytest.raises(ModelLoadError, match="is a directory"):
        extract(tmp_path)
    with pytest.raises(ModelLoadError, match="no file can have this name"):
        extract(str(tmp_path / "a\0b.onnx"))
    with pytest.raises(ModelLoadError, match="cannot read: File name too long"):
        extract(tmp_path / ("x" * 5000))


def test_networkx_view_merges_parallel_tensors():
    nodes = [helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2, name="split"),
             helper.make_node("Concat", ["a", "b"], ["y"], axis=1, name="cat")]
    g = extract(model(nodes, [("x", [1, 4, 2, 2])], [("y", None)]))
    assert g.num_edges == 2  # two tensors, one pair of nodes
    view = g.to_networkx()
    assert isinstance(view, nx.DiGraph)
    assert view.number_of_edges() == 1
    assert sorted(view.edges[0, 1]["tensors"]) == ["a", "b"]
    assert view.nodes[1]["op"] == "Concat"
    assert view.graph["num_nodes"] == 2


def test_npz_round_trip_and_dict(tmp_path):
    g = extract(conv_chain(), batch=2)
    p = tmp_path / "g.npz"
    g.save_npz(p)
    h = PerfGraph.load_npz(p)
    np.testing.assert_array_equal(g.x, h.x)
    np.testing.assert_array_equal(g.edge_index, h.edge_index)
    assert h.node_names == g.node_names
    d = g.to_dict()
    assert {"feature_version", "global", "nodes", "edges"} <= d.keys()
    assert {"name", "op", "flops", "mac", "weight"} <= d["nodes"][0].keys()
    assert {"src", "dst", "shape"} <= d["edges"][0].keys()
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


@pytest.mark.parametrize("kwargs, message", [
    ({"input_shapes": "x:1x3x8x8"}, "input_shapes: expected a dict"),
    ({"input_shapes": {"x": "1x3"}}, "input 'x': shape '1x3' is not a list of ints"),
    ({"dims": [("seq", 3)]}, "dims: expected a dict"),
])
def test_shape_options_of_another_type_are_a_shape_error(kwargs, message):
    """A string or list where a dict belongs had ended as an internal
    GraphError ("cannot be extracted (AttributeError ...)")."""
    for call in (extract, lambda m, **kw: extract_batches(m, [1, 2], **kw)):
        with pytest.raises(ShapeError, match=re.escape(message)):
            call(conv_chain(), **kwargs)
