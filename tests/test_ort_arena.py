"""The simulated onnxruntime CPU arena (perfseer_rt.predict.ort_arena): the
plan's fusions and in-place reuse, the arena's best fit, coalescing and
resident pages, the memory-pattern block, on hand-made graphs whose answers
follow from the rules by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from perfseer_rt.graph import extract
from perfseer_rt.predict import ort_arena as oa
from tests.onnx_builders import const, model

C, H, W = 16, 32, 32
BYTES = C * H * W * 4  # one activation of the graphs below
EXAMPLE = Path(__file__).parents[1] / "examples" / "resnet18.onnx"


def conv(name: str, src: str, dst: str) -> list:
    return [helper.make_node("Conv", [src, f"{name}_w"], [dst], pads=[1, 1, 1, 1], kernel_shape=[3, 3])]


def graph_of(nodes, inits, out: str = "y"):
    m = model(nodes, [("x", [1, C, H, W])], [(out, [1, C, H, W])], inits)
    return extract(m, batch=1)


def weights(*names: str) -> list:
    return [const(f"{n}_w", [C, C, 3, 3]) for n in names]


def bn_inits(name: str) -> list:
    return [const(f"{name}_{p}", [C], np.ones(C)) for p in ("s", "b", "m", "v")]


def test_conv_bn_relu_is_one_buffer_and_a_view_aliases():
    nodes = conv("a", "x", "c") + [
        helper.make_node("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("Identity", ["r"], ["y"])]
    g = graph_of(nodes, weights("a") + bn_inits("bn"))
    plan = oa.plan_buffers(g.x, g.edge_index, g.edge_attr)
    assert g.num_nodes == 4 and len(plan.size) == 1 and plan.size[0] == BYTES


def test_an_activation_read_twice_is_not_fused():
    """Fusion needs the convolution's output to have no other reader."""
    nodes = conv("a", "x", "c") + [helper.make_node("Relu", ["c"], ["r"]),
                                   helper.make_node("Add", ["c", "r"], ["y"])]
    g = graph_of(nodes, weights("a"))
    plan = oa.plan_buffers(g.x, g.edge_index, g.edge_attr)
    # conv and relu own a buffer each; the Add writes in place into one of them (both die at it)
    assert len(plan.size) == 2


def test_residual_add_accumulates_into_the_dying_operand():
    """x -> conv a -> h; conv b(h) + h -> y: conv b writes into h's buffer."""
    nodes = conv("a", "x", "h") + conv("b", "h", "c") + [helper.make_node("Add", ["c", "h"], ["y"])]
    g = graph_of(nodes, weights("a", "b"))
    plan = oa.plan_buffers(g.x, g.edge_index, g.edge_attr)
    assert len(plan.size) == 1
    assert oa.pattern_block(plan) == BYTES


def test_an_element_wise_chain_runs_in_place():
    """Sigmoid after Sigmoid after a graph input: each writes into its dying
    input of the same size, so three nodes hold one buffer."""
    m = model([helper.make_node("Sigmoid", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["b"]),
               helper.make_node("Sigmoid", ["b"], ["y"])], [("x", [1, C, H, W])], [("y", [1, C, H, W])])
    g = extract(m, batch=1)
    plan = oa.plan_buffers(g.x, g.edge_index, g.edge_attr)
    assert len(plan.size) == 1


def test_pattern_block_takes_the_best_fitting_gap():
    """Buffers of 4, 1, 4 KiB; the first 4 KiB dies, then 2 KiB comes: it goes
    into the 4 KiB hole at offset 0 (the only gap), so the block stays 9 KiB."""
    k = 1024
    plan = oa.Buffers(size=np.array([4 * k, 1 * k, 4 * k, 2 * k], float),
                      start=np.array([0, 1, 2, 4]), end=np.array([3, 6, 6, 6]), nodes=6)
    assert oa.pattern_block(plan) == 9 * k
    # if the 2 KiB came while all three lived, it would go after them
    plan = oa.Buffers(size=plan.size, start=np.array([0, 1, 2, 2]), end=plan.end, nodes=6)
    assert oa.pattern_block(plan) == 11 * k


def test_arena_best_fit_coalescing_and_resident_pages():
    a = oa.Arena()
    p = oa.PAGE
    first = a.allocate(10 * p)
    second = a.allocate(10 * p)
    assert second == first + 10 * p            # split from the first region
    assert a.resident() == 20 * p
    a.release(first)
    a.release(second)                          # coalesced with the first and the rest of the region
    again = a.allocate(30 * p)
    assert again == first and a.resident() == 30 * p   # reuses written pages, writes 10 more
    a.release(again)
    # larger than the first region (1 MiB): a new region, at least the request
    big = a.allocate(2 * oa.FIRST_REGION)
    assert big != first and a.resident() == 30 * p + 2 * oa.FIRST_REGION


def test_arena_does_not_split_a_chunk_under_twice_the_request():
    a = oa.Arena()
    x = a.allocate(oa.FIRST_REGION * 0.75)     # the 1 MiB region is not twice the request: x gets it whole
    y = a.allocate(1000)
    assert y != x
    assert y >= x + oa.FIRST_REGION            # so y opens a second region


@pytest.mark.parametrize("batch", [1, 4])
def test_footprint_of_a_real_model_scales_with_the_batch(batch):
    g = extract(EXAMPLE, batch=batch)
    f = oa.footprint(g.x, g.edge_index, g.edge_attr)
    assert f.resident >= f.first_run > 0
    assert f.pattern > 0 and np.isfinite(f.resident)
    if batch == 4:
        one = extract(EXAMPLE, batch=1)
        f1 = oa.footprint(one.x, one.edge_index, one.edge_attr)
        assert 3.8 < f.resident / f1.resident < 4.2  # activations scale 4x; the arena adds no fixed cost here


def test_the_simulated_first_run_grows_the_arena_as_onnxruntime_does(tmp_path):
    """Ground truth from onnxruntime's own arena log (training/byod/arena_log.py):
    a runnable residual conv net at batch 64 (4 MiB activations), region by
    region, and the memory-pattern block the later runs take."""
    from training.byod.arena_log import real_growth, simulated_growth

    nodes = conv("a", "x", "h") + [helper.make_node("Relu", ["h"], ["r"])] + conv("b", "r", "c") + [
        helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["t"])] + conv("d", "t", "y")
    m = model(nodes, [("x", ["N", C, H, W])], [("y", ["N", C, H, W])], weights("a", "b", "d"))
    path = tmp_path / "net.onnx"
    path.write_bytes(m.SerializeToString())
    real, sim = real_growth(path, 64), simulated_growth(path, 64)
    assert real, "onnxruntime logged no arena extension (has its log format changed?)"
    assert [e["region"] for e in real if e["run"] == 0] == [e["region"] for e in sim["first_run_regions"]]
    assert [e["request"] for e in real if e["run"] > 0] == [sim["pattern_block"]]


def test_the_exact_pattern_block_is_read_from_an_arena_of_exact_regions(tmp_path):
    """training/byod/arena_log.real_block reads onnxruntime's memory-pattern
    block from an arena whose regions are exactly the requests (where the
    default arena's doubled regions may hold it without a log line): on a
    plain conv chain it is the simulated block, two activations alive at
    each convolution."""
    from training.byod.arena_log import real_block, simulated_growth

    nodes = conv("a", "x", "h") + [helper.make_node("Relu", ["h"], ["r"])] + conv("b", "r", "c") + [
        helper.make_node("Relu", ["c"], ["t"])] + conv("d", "t", "u") + [
        helper.make_node("ReduceMean", ["u"], ["y"], keepdims=0)]
    m = model(nodes, [("x", ["N", C, H, W])], [("y", [])], weights("a", "b", "d"))
    path = tmp_path / "chain.onnx"
    path.write_bytes(m.SerializeToString())
    block, sim = real_block(path, 64), simulated_growth(path, 64)
    assert block == sim["pattern_block"] == 2 * 64 * BYTES
