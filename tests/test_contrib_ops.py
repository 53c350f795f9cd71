"""onnxruntime's contrib ops (domain com.microsoft) are typed and costed
(issue 13: every real model): int4 weight-only LLM layers as onnxruntime's
GenAI builder writes them, BERT layers as its transformer optimizer fuses
them, and a model quantized by onnxruntime's own MatMulNBits quantizer. The
shapes are checked against onnxruntime running the same models."""

import numpy as np
import onnx
import pytest
from onnx import helper

from perfseer_rt import extract
from perfseer_rt.graph.contrib import CONTRIB_RULES
from perfseer_rt.graph.ops import is_known
from tests.contrib_models import bert_feeds, bert_layer, llama_block, llama_feeds, run_shapes
from tests.onnx_builders import const, model


def _edge_shapes(g) -> dict:
    return {t: tuple(s) for t, s in zip(g.edge_tensors, g.edge_shapes)}


@pytest.mark.parametrize("batch,seq,past", [(1, 7, 5), (2, 1, 12)])
def test_int4_llama_layer_shapes_match_onnxruntime(batch, seq, past):
    m = llama_block()
    ran = run_shapes(m, llama_feeds(batch, seq, past))
    g = extract(m, dims={"batch": batch, "seq": seq, "past": past})
    ours = _edge_shapes(g)
    assert g.unknown_ops == []
    assert len(ours) >= 12 and set(ours) <= set(ran)
    assert ours == {t: ran[t] for t in ours}
    assert ran["present_key"] == (batch, 2, past + seq, 16)  # past plus new tokens, as assumed
    assert any("stored as uint8" in w for w in g.warnings)  # weight-only int4 is flagged


@pytest.mark.parametrize("batch,seq", [(1, 9), (3, 16)])
def test_fused_bert_layer_shapes_match_onnxruntime(batch, seq):
    m = bert_layer()
    ran = run_shapes(m, bert_feeds(batch, seq))
    g = extract(m, dims={"batch": batch, "seq": seq})
    ours = _edge_shapes(g)
    assert g.unknown_ops == []
    assert g.node_ops == ["EmbedLayerNormalization", "Attention", "SkipLayerNormalization",
                          "FusedMatMul", "BiasGelu", "MatMul", "MultiHeadAttention"]
    assert ours == {t: ran[t] for t in ours} and len(ours) == 7


def test_block_quantized_matmul_costs_the_matmul_and_its_dequantization():
    """A [4, 8, 64] x [64, 96] MatMul quantized by onnxruntime's own
    MatMulNBitsQuantizer (4 bits, blocks of 32) against the float model."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 96)).astype(np.float32)
    fp32 = model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                 [("x", ["batch", 8, 64])], [("y", None)], [const("w", (64, 96), w)], opset=17)
    q = MatMulNBitsQuantizer(onnx.ModelProto.FromString(fp32.SerializeToString()), block_size=32,
                             is_symmetric=True, bits=4)
    q.process()
    int4 = q.model.model
    assert [n.op_type for n in int4.graph.node] == ["MatMulNBits"]
    a, b = extract(fp32, batch=4), extract(int4, batch=4)
    assert b.edge_shapes == a.edge_shapes and not b.unknown_ops
    m_k_n = 4 * 8 * 64 * 96
    assert a.globals["flops_total"] == 2 * m_k_n
    assert b.globals["flops_total"] == 2 * m_k_n + 64 * 96  # + one dequantization per weight
    # the packed weight and its scales are the weights: 4 bits per value plus a float per block
    assert b.info["weight_bytes_unique"] == 96 * 2 * 16 + 96 * 2 * 4 < a.info["weight_bytes_unique"]


def test_contrib_shape_rules_have_cost_rules():
    """Every contrib op typed here is costed by a rule, not left unknown."""
    assert [op for op in CONTRIB_RULES if not is_known(op)] == []


def test_contrib_op_without_its_attributes_is_typed_by_the_generic_rule():
    """A MatMulNBits without K/N cannot be typed by its rule: its output is
    guessed like its input (the documented rule for unknown ops) and the
    node is reported as one whose inputs its cost rule cannot read."""
    node = helper.make_node("MatMulNBits", ["x", "w"], ["h"], domain="com.microsoft")
    m = model([node, helper.make_node("Relu", ["h"], ["y"])], [("x", [1, 16])], [("y", None)],
              [const("w", (16, 1, 8), np.zeros((16, 1, 8), np.uint8), dtype=np.uint8)],
              opset=17, domains=("com.microsoft",))
    g = extract(m)
    assert g.edge_shapes == [(1, 16)]
    assert g.unknown_ops == ["MatMulNBits (unreadable inputs)"]
