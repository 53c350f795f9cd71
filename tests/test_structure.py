"""Structure globals of layout psrt-2: weight by operator kind, activation liveness, upgrades."""

import numpy as np
import pytest
from onnx import helper

from perfseer_rt import PerfGraph, extract
from perfseer_rt.errors import PerfSeerError
from perfseer_rt.graph import layout, structure
from tests.onnx_builders import const, model
from tests.test_extract import conv_chain

G = layout.column_index(layout.GLOBAL_COLUMNS)


def test_liveness_of_a_conv_chain_counts_each_output_until_its_last_reader():
    g = extract(conv_chain(), batch=2)
    assert g.node_ops == ["Conv", "Relu", "Conv", "Add", "Reshape"]
    out = 2 * 8 * 8 * 8 * 4  # every output is [2, 8, 8, 8] float32
    # conv1 -> relu1 -> conv2 -> add(conv2, relu1) -> reshape (a view of add's output)
    # alive at add: relu1 (read by add), conv2, add's own output
    assert g.u[G["act_live_peak"]] == 3 * out
    assert g.u[G["act_total"]] == 4 * out  # the reshape allocates nothing


def test_weights_split_by_the_operator_that_reads_them():
    g = extract(conv_chain(), batch=2)
    w1, w2 = 8 * 3 * 3 * 3 * 4, 8 * 8 * 3 * 3 * 4
    assert g.u[G["weight_total"]] == w1 + w2
    assert g.u[G["weight_conv_kxk"]] == w1 + w2
    assert g.u[G["weight_conv_unaligned"]] == w1 + w2  # 3 and 8 channels: not multiples of 16
    for c in ("weight_conv1x1", "weight_conv_grouped", "weight_matmul", "weight_other", "flops_matmul"):
        assert g.u[G[c]] == 0
    aligned = extract(conv_chain(channels=(16, 32, 32)), batch=1)
    assert aligned.u[G["weight_conv_unaligned"]] == 0 and aligned.u[G["weight_conv_kxk"]] > 0


def test_a_tied_weight_is_counted_once_in_its_operator_kind():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w"], ["y"])]
    m = model(nodes, [("x", [4, 16])], [("y", [4, 16])], [const("w", (16, 16))])
    g = extract(m)
    assert g.u[G["weight_total"]] == 16 * 16 * 4
    assert g.u[G["weight_matmul"]] == 16 * 16 * 4
    assert g.u[G["flops_matmul"]] == g.u[G["flops_total"]] - g.x[1, layout.NODE_COLUMNS.index("flops")]


def test_an_older_layout_is_upgraded_to_the_same_globals(tmp_path):
    g = extract(conv_chain(channels=(3, 16, 16)), batch=4)
    base = g.u[:len(layout.BASE_GLOBAL_COLUMNS)]
    again = structure.upgrade_globals("psrt-1", g.x, g.edge_index, g.edge_attr, base)
    np.testing.assert_array_equal(again, g.u)
    # a PerfGraph file written by an older perfseer-rt loads in the current layout
    path = tmp_path / "old.npz"
    g.save_npz(path)
    with np.load(path) as z:
        old = {k: z[k] for k in z.files}
    old.update(u=base, feature_version=np.array("psrt-1"),
               global_columns=np.array(layout.BASE_GLOBAL_COLUMNS, dtype=str))
    np.savez(path, **old)
    loaded = PerfGraph.load_npz(path)
    assert loaded.feature_version == layout.FEATURE_VERSION
    np.testing.assert_array_equal(loaded.u, g.u)


def test_unknown_layouts_are_refused(tmp_path):
    g = extract(conv_chain(), batch=1)
    with pytest.raises(ValueError, match="psrt-0"):
        structure.upgrade_globals("psrt-0", g.x, g.edge_index, g.edge_attr, g.u)
    with pytest.raises(ValueError, match="cannot be upgraded"):  # psrt-1 has 19 globals, not 29
        structure.upgrade_globals("psrt-1", g.x, g.edge_index, g.edge_attr, g.u)
    path = tmp_path / "g.npz"
    g.save_npz(path)
    with np.load(path) as z:
        old = {k: z[k] for k in z.files}
    np.savez(path, **{**old, "feature_version": np.array("psrt-0")})
    with pytest.raises(PerfSeerError, match="re-extract"):
        PerfGraph.load_npz(path)
