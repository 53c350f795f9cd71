"""Mixture-of-experts layers as transformers' eager experts loop traces them
(Mixtral, Qwen2-MoE, OLMoE): TopK routing -> a OneHot mask -> one NonZero
per expert listing the tokens routed to it, and a Split of the experts hit
that the trace fixed. Extraction failed on them (the Split's sizes sum below
the NonZero's upper bound, so onnx's inference refused it), and the upper
bound alone would cost every token through every expert. The tokens routed
to each expert are now an even share of the routed slots: the total is
exact, checked against onnxruntime running the same graph."""

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from perfseer_rt import extract
from perfseer_rt.graph import data_dependent
from perfseer_rt.graph.layout import NODE_COLUMNS
from tests.onnx_builders import const

I64 = TensorProto.INT64
F32 = TensorProto.FLOAT
EXPERTS, TOP_K, HIDDEN, FFN = 4, 2, 8, 16
MODELS = Path(__file__).parent / "models"


def _moe_layer() -> onnx.ModelProto:
    """x [seq, HIDDEN] -> the MoE layer's expert outputs, concatenated
    (Σ over experts of its routed rows, FFN wide), as the eager loop writes it
    for EXPERTS experts, TOP_K a token, a one-hot of EXPERTS + 1 classes."""
    nodes = [
        helper.make_node("MatMul", ["x", "gate"], ["logits"]),
        helper.make_node("TopK", ["logits", "k"], ["top_w", "top_i"], axis=-1),
        helper.make_node("OneHot", ["top_i", "depth", "onoff"], ["mask"], axis=-1),
        helper.make_node("Transpose", ["mask"], ["mask_t"], perm=[2, 1, 0]),
        helper.make_node("ReduceSum", ["mask_t", "slot_axes"], ["per_class"], keepdims=0),
        helper.make_node("Greater", ["per_class", "zero"], ["hit_mask"]),
        helper.make_node("NonZero", ["hit_mask"], ["hit"]),
        helper.make_node("Transpose", ["hit"], ["hit_t"], perm=[1, 0]),
        helper.make_node("Split", ["hit_t", "ones"], [f"pick{e}" for e in range(EXPERTS)],
                         axis=0),
    ]
    outs = []
    for e in range(EXPERTS):
        nodes += [
            helper.make_node("Squeeze", [f"pick{e}", "axis1"], [f"idx{e}"]),
            helper.make_node("Gather", ["mask_t", f"idx{e}"], [f"sel{e}"], axis=0),
            helper.make_node("Squeeze", [f"sel{e}", "axis0"], [f"m{e}"]),
            helper.make_node("NonZero", [f"m{e}"], [f"nz{e}"]),
            helper.make_node("Gather", [f"nz{e}", "row1"], [f"tok{e}"], axis=0),
            helper.make_node("Gather", ["x", f"tok{e}"], [f"rows{e}"], axis=0),
            helper.make_node("MatMul", [f"rows{e}", f"w{e}"], [f"h{e}"]),
        ]
        outs.append(f"h{e}")
    nodes += [helper.make_node("Concat", outs, ["cat"], axis=0),
              helper.make_node("Relu", ["cat"], ["y"]),
              helper.make_node("Cast", ["hit"], ["hit_f"], to=F32)]
    rng = np.random.default_rng(0)
    inits = [const("gate", (HIDDEN, EXPERTS), rng.normal(size=(HIDDEN, EXPERTS))),
             const("k", (1,), [TOP_K], dtype=np.int64),
             const("depth", (), EXPERTS + 1, dtype=np.int64),
             const("onoff", (2,), [0, 1], dtype=np.int64),
             const("slot_axes", (2,), [1, 2], dtype=np.int64),
             const("zero", (), 0, dtype=np.int64),
             const("ones", (EXPERTS,), [1] * EXPERTS, dtype=np.int64),
             const("axis0", (1,), [0], dtype=np.int64), const("axis1", (1,), [1], dtype=np.int64),
             const("row1", (), 1, dtype=np.int64),
             *[const(f"w{e}", (HIDDEN, FFN)) for e in range(EXPERTS)]]
    graph = helper.make_graph(
        nodes, "moe", [helper.make_tensor_value_info("x", F32, ["seq", HIDDEN])],
        [helper.make_tensor_value_info("y", F32, None),
         helper.make_tensor_value_info("hit_f", F32, None)], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def _run(m: onnx.ModelProto, x: np.ndarray) -> dict:
    """Every node output's shape when onnxruntime runs ``m`` on ``x``."""
    full = onnx.ModelProto()
    full.CopyFrom(m)
    have = {o.name for o in full.graph.output}
    full.graph.output.extend(helper.make_empty_tensor_value_info(o) for n in m.graph.node
                             for o in n.output if o not in have)
    sess = ort.InferenceSession(full.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return {k: tuple(v.shape) for k, v in zip(names, sess.run(None, {"x": x}))}


@pytest.mark.parametrize("seq", [16, 40])
def test_each_expert_takes_an_even_share_and_the_total_is_exact(seq):
    m = _moe_layer()
    x = np.random.default_rng(seq).normal(size=(seq, HIDDEN)).astype(np.float32)
    ran = _run(m, x)
    assert ran["hit"] == (1, EXPERTS)  # every expert hit: the traced Split can run
    g = extract(m, dims={"seq": seq})
    ours = dict(zip(g.edge_tensors, g.edge_shapes))
    slots = seq * TOP_K
    share = -(-slots // EXPERTS)
    assert [ours[f"nz{e}"] for e in range(EXPERTS)] == [(2, share)] * EXPERTS
    # the routed rows sum to what onnxruntime routes (the share is exact here)
    assert sum(ran[f"nz{e}"][1] for e in range(EXPERTS)) == slots == EXPERTS * share
    assert ours["cat"] == ran["cat"] == (slots, FFN)
    # the experts' GEMMs cost the routed rows once, not every token per expert
    flops = g.x[:, NODE_COLUMNS.index("flops")]
    matmuls = sum(f for f, op in zip(flops, g.node_ops) if op == "MatMul")
    gate = 2 * seq * HIDDEN * EXPERTS
    assert matmuls - gate == pytest.approx(2 * slots * HIDDEN * FFN)
    # the experts-hit NonZero keeps its upper bound, the Split its traced sizes
    assert ours["hit"] == (1, EXPERTS + 1)
    assert ours["pick0"] == ran["pick0"] == (1, 1)
    note = next(w for w in g.warnings if "mixture-of-experts" in w)
    assert f"{EXPERTS} NonZero node(s)" in note and f"{slots} slots over {EXPERTS} experts" in note
    bound = next(w for w in g.warnings if "depend on the data" in w)
    assert "1 NonZero, 1 Split" in bound


def test_a_nonzero_of_a_whole_mask_keeps_its_upper_bound():
    """A NonZero over the whole one-hot mask (not one class's slice of it)
    is no expert's token list: it keeps the upper bound; the others keep
    their share of the EXPERTS NonZeros reading the mask."""
    m = _moe_layer()
    for n in m.graph.node:  # expert 1 reads the whole mask
        if n.op_type == "NonZero" and n.input[0] == "m1":
            n.input[0] = "mask_t"
    groups = data_dependent.routing_groups(
        m.graph.node, {o: n for n in m.graph.node for o in n.output})
    assert groups == {"mask": EXPERTS}
    seq = 16
    g = extract(m, dims={"seq": seq})
    ours = dict(zip(g.edge_tensors, g.edge_shapes))
    assert ours["nz1"] == (3, (EXPERTS + 1) * TOP_K * seq)
    assert ours["nz0"] == (2, seq * TOP_K // EXPERTS)
    assert "3 NonZero node(s) list the tokens" in next(
        w for w in g.warnings if "mixture-of-experts" in w)
    # fewer than two experts, or a mask not one slot per element: no share
    assert data_dependent.routed_count((I64, (2, 16)), (I64, (16, 2)), (I64, (16, 2, 5)), 1) is None
    assert data_dependent.routed_count((I64, (5, 2, 16)), (I64, (16, 2)), (I64, (16, 2, 5)),
                                       4) is None
    assert data_dependent.routed_count((I64, (2, 16)), (I64, (16, 2)), (I64, (16, 2, 5)), 4) == 8


def test_a_split_summing_above_its_input_stays_an_error():
    """The traced-sizes rule only narrows an axis that was bounded upstream;
    sizes that do not fit a static axis are the model's error."""
    x = helper.make_tensor_value_info("x", F32, [3, 4])
    graph = helper.make_graph(
        [helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=0),
         helper.make_node("Relu", ["a"], ["ya"]), helper.make_node("Relu", ["b"], ["yb"])],
        "g", [x], [helper.make_tensor_value_info("ya", F32, None),
                   helper.make_tensor_value_info("yb", F32, None)],
        initializer=[const("sizes", (2,), [1, 1], dtype=np.int64)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    with pytest.raises(Exception) as err:
        extract(m)
    assert "could not be inferred" in str(err.value)


def test_a_traced_mixtral_extracts_with_each_expert_at_its_share():
    """tests/models/mixtral_moe.onnx: transformers' Mixtral (8 experts, 2 a
    token, 2 layers) as torch's TorchScript exporter writes it
    (``python -m tests.models.build``). It failed to extract before."""
    g = extract(MODELS / "mixtral_moe.onnx", batch=2, dims={"seq": 48})
    ours = dict(zip(g.edge_tensors, g.edge_shapes))
    found = sorted(s for t, s in ours.items() if "/experts/NonZero" in t)
    # per layer: the experts hit (at most the 9 classes: its bound), and 8 routed lists
    assert found == [(1, 9)] * 2 + [(2, 2 * 48 * 2 // 8)] * 16
    assert any("192 slots over 8 experts, 24 each" in w for w in g.warnings)
    assert not g.unknown_ops
    # the experts' weights are 3-D banks each expert's Gather reads a slice of: not tied
    assert any("read in slices by several Gather nodes (32 uses" in w for w in g.warnings)
    assert not any("tied weights" in w for w in g.warnings)
