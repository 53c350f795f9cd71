"""training/byod/ort_plan.py: onnxruntime's allocation plan and memory
pattern replayed on the graph onnxruntime runs, checked by hand on small
graphs and against onnxruntime's own block (training/byod/arena_log.py)."""

from __future__ import annotations

from onnx import helper

from tests.onnx_builders import model
from tests.test_ort_arena import BYTES, C, H, W, conv, weights
from training.byod import ort_plan as op


def _chain(ops_shapes):
    """A graph of Transposes (no view, no in-place kernel): each entry is the
    output's shape; sizes as a real run would give them."""
    nodes, sizes, prev = [], {}, "x"
    for k, shape in enumerate(ops_shapes):
        out = f"t{k}"
        nodes.append(helper.make_node("Transpose", [prev], [out], perm=list(range(len(shape)))))
        n = 1
        for d in shape:
            n *= d
        sizes[out] = (tuple(shape), 4, 4 * n)
        prev = out
    nodes.append(helper.make_node("ReduceMean", [prev], ["y"], keepdims=0))
    return model(nodes, [("x", [1, 8, 8, 8])], [("y", [])], []), sizes


def test_a_dead_buffer_of_the_same_shape_is_reused_and_lives_on():
    """t3 has t0's shape: it takes t0's buffer (freed after t1 read it), so
    that buffer is alive from t0 to t3 and the block holds three tensors,
    where fresh allocations would have needed two (onnxruntime measured the
    same on ConvNeXt's stem, reports/cpu-calibrate)."""
    a, b = [1, 16, 8, 8], [1, 8, 8, 16]
    m, sizes = _chain([a, b, b, a])
    p = op.plan(m, sizes)
    one = 4 * 16 * 8 * 8
    assert p.buffers.size.tolist() == [one, one, one]        # t0, t1, t2; t3 is t0's buffer again
    assert p.buffers.end.tolist() == [4, 2, 3]                # t0's buffer lives until t3's reader
    assert p.block == 3 * one


def test_the_plan_equals_onnxruntimes_own_block(tmp_path):
    """A residual conv net and a plain conv chain at batch 64: the block
    planned on onnxruntime's optimized graph is the one onnxruntime
    allocates (exact arena, training.byod.arena_log.real_block)."""
    from training.byod.arena_log import real_block

    residual = conv("a", "x", "h") + [helper.make_node("Relu", ["h"], ["r"])] + conv("b", "r", "c") + [
        helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["t"])] + conv("d", "t", "u")
    chain = conv("a", "x", "h") + [helper.make_node("Relu", ["h"], ["r"])] + conv("b", "r", "c") + [
        helper.make_node("Relu", ["c"], ["t"])] + conv("d", "t", "u")
    for name, nodes in (("residual", residual), ("chain", chain)):
        nodes = nodes + [helper.make_node("ReduceMean", ["u"], ["y"], keepdims=0)]
        m = model(nodes, [("x", ["N", C, H, W])], [("y", [])], weights("a", "b", "d"))
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(m.SerializeToString())
        planned, real = op.of_model(path, 64).block, real_block(path, 64)
        assert real is not None and planned == real, (name, planned, real)
        assert planned >= 2 * 64 * BYTES
