"""onnxruntime's contrib ops (domain com.microsoft) are typed and costed
(issue 13: every real model): int4 weight-only LLM layers as onnxruntime's
GenAI builder writes them, BERT layers as its transformer optimizer fuses
them, and a model quantized by onnxruntime's own MatMulNBits quantizer. The
shapes are checked against onnxruntime running the same models."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from perfseer_rt import extract
from perfseer_rt.errors import ShapeError
from perfseer_rt.graph import layout
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


GENAI = Path(__file__).parent / "models" / "genai_llama_int4.onnx"
GENAI_DIMS = {"batch_size": 2, "sequence_length": 16, "past_sequence_length": 8,
              "total_sequence_length": 24}


def test_genai_builders_kv_cache_dim_is_implied_as_the_head_size():
    """onnxruntime-genai's builder leaves the KV cache's last dim symbolic
    (``kv_cache_dim``); its LLaMA here has 4 heads over a width of 256."""
    implied = extract(GENAI, dims=GENAI_DIMS)
    given = extract(GENAI, dims={**GENAI_DIMS, "kv_cache_dim": 64})
    assert implied.input_shapes["past_key_values.0.key"] == (2, 2, 8, 64)
    assert implied.input_shapes == given.input_shapes
    for a, b in ((implied.x, given.x), (implied.u, given.u), (implied.edge_attr, given.edge_attr)):
        np.testing.assert_array_equal(a, b)
    assert implied.unknown_ops == []
    assert [w for w in implied.warnings if "kv_cache_dim" in w] == [
        "input dim 'kv_cache_dim' was not given: set to 64, the head size of the model's "
        "GroupQueryAttention nodes that read it as their KV cache's last dim (an unquantized "
        "cache); give --dim kv_cache_dim=N where the model is run otherwise"]
    assert not [w for w in given.warnings if "kv_cache_dim" in w]


def test_an_implied_dim_leaves_the_other_missing_dims_named():
    with pytest.raises(ShapeError) as err:
        extract(GENAI, dims={"batch_size": 2, "sequence_length": 4})
    for name in ("past_sequence_length", "total_sequence_length", "kv_cache_dim"):
        assert f"--dim {name}=N" in str(err.value)


@pytest.mark.parametrize("batch,seq,past", [(1, 5, 3), (2, 1, 9)])
def test_an_implied_cache_dim_matches_onnxruntime(batch, seq, past):
    """The int4 layer with its cache's last dim symbolic: the implied size
    is what onnxruntime runs it with (head 16: a width of 64 over 4 heads)."""
    m = llama_block()
    for vi in m.graph.input:
        if vi.name.startswith("past_"):
            vi.type.tensor_type.shape.dim[3].dim_param = "kv_cache_dim"
    g = extract(m, dims={"batch": batch, "seq": seq, "past": past})
    assert g.input_shapes["past_key"] == (batch, 2, past, 16)
    ran = run_shapes(m, llama_feeds(batch, seq, past))
    ours = _edge_shapes(g)
    assert ours == {t: ran[t] for t in ours} and len(ours) >= 12


def test_a_sliding_window_cache_is_window_sized_as_onnxruntime_runs_it():
    """A GroupQueryAttention with a sliding-window cache (Gemma2 as the
    GenAI builder writes it): its cache length, not given, is the window,
    and its present cache keeps the past's shape (onnxruntime's outputs)."""
    m = llama_block()
    gqa = next(n for n in m.graph.node if n.op_type == "GroupQueryAttention")
    gqa.attribute.extend([helper.make_attribute("local_window_size", 32),
                          helper.make_attribute("sliding_window_cache", 1)])
    for vi in m.graph.input:
        if vi.name.startswith("past_"):
            vi.type.tensor_type.shape.dim[2].dim_param = "past_sliding"
    g = extract(m, dims={"batch": 2, "seq": 1, "past": 0})  # a decode step
    assert g.input_shapes["past_key"] == (2, 2, 32, 16)
    assert any("'past_sliding' was not given: set to 32, the local_window_size" in w
               for w in g.warnings)
    feeds = llama_feeds(2, 1, 32)
    feeds["seqlens_k"][:] = 10  # 10 tokens in the window's buffer, 1 new
    feeds["total_seq_len"][...] = 11
    ran = run_shapes(m, feeds)
    assert ran["present_key"] == ran["present_value"] == (2, 2, 32, 16)
    ours = _edge_shapes(g)
    assert ours == {t: ran[t] for t in ours} and len(ours) >= 12
    out_elems = g.x[g.node_ops.index("GroupQueryAttention"), layout.NODE_COLUMNS.index("out_elems")]
    assert out_elems == np.prod(ran["attn"]) + 2 * np.prod(ran["present_key"])


def test_the_implied_shapes_are_resolved_without_extracting():
    from perfseer_rt.graph import resolve_input_shapes

    assert resolve_input_shapes(GENAI, dims=GENAI_DIMS) == extract(GENAI, dims=GENAI_DIMS).input_shapes


def _small_cnn() -> onnx.ModelProto:
    """Conv-Relu, a residual Add, average pooling, a concat, global pooling, Flatten, Gemm."""
    rng = np.random.default_rng(1)
    inits = [const("w1", (8, 3, 3, 3), rng.standard_normal((8, 3, 3, 3))),
             const("w2", (8, 8, 3, 3), rng.standard_normal((8, 8, 3, 3))),
             const("fc", (10, 16), rng.standard_normal((10, 16))),
             const("fcb", (10,), rng.standard_normal(10))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r1"], ["s"]),
             helper.make_node("AveragePool", ["s"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Sigmoid", ["p"], ["g"]),
             helper.make_node("Concat", ["p", "g"], ["cat"], axis=1),
             helper.make_node("GlobalAveragePool", ["cat"], ["gap"]),
             helper.make_node("Flatten", ["gap"], ["flat"]),
             helper.make_node("Gemm", ["flat", "fc", "fcb"], ["y"], transB=1)]
    return model(nodes, [("x", ["batch", 3, 16, 16])], [("y", None)], inits, opset=17)


@pytest.mark.parametrize("fmt", ["QOperator", "QDQ"])
def test_statically_quantized_cnn_shapes_match_onnxruntime(fmt, tmp_path):
    """onnxruntime's static quantizer: the QOperator format writes contrib
    ops (QLinearAdd, QLinearAveragePool, QLinearSigmoid, QLinearConcat,
    QLinearGlobalAveragePool, QGemm) whose outputs were shaped like their
    first input before (a 1000-class head came out 25,088 wide)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Images(CalibrationDataReader):
        def __init__(self):
            self.left = 2

        def get_next(self):
            self.left -= 1
            return {"x": np.random.default_rng(self.left).random((1, 3, 16, 16), np.float32)} \
                if self.left >= 0 else None

    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(_small_cnn(), src)
    quantize_static(str(src), str(dst), Images(), quant_format=getattr(QuantFormat, fmt))
    q = onnx.load(str(dst))
    ops = {n.op_type for n in q.graph.node}
    if fmt == "QOperator":
        assert {"QLinearAdd", "QLinearGlobalAveragePool", "QGemm"} <= ops
    ran = run_shapes(q, {"x": np.zeros((3, 3, 16, 16), np.float32)})
    g = extract(q, batch=3)
    ours = _edge_shapes(g)
    assert g.unknown_ops == []
    assert len(ours) >= 9 and ours == {t: ran[t] for t in ours}


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_dynamically_quantized_lstm_is_shaped_and_costed_as_its_lstm(direction, tmp_path):
    """onnxruntime's dynamic quantizer writes an LSTM as DynamicQuantizeLSTM
    (int8 W and R, stored transposed): it had no shape rule, and its rank-4
    output guessed rank 3 made the Transpose after it fail (ddddocr's
    bundled OCR model). Its shapes now match onnxruntime's and it costs what
    the float LSTM costs."""
    from onnxruntime.quantization import quantize_dynamic

    dirs, hidden, width = (2 if direction == "bidirectional" else 1), 16, 8
    nodes = [helper.make_node("LSTM", ["x", "w", "r", "b"], ["y", "yh", "yc"], hidden_size=hidden,
                              direction=direction),
             helper.make_node("Transpose", ["y"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Relu", ["t"], ["z"])]
    rng = np.random.default_rng(0)
    inits = [const(n, s, rng.random(s)) for n, s in (("w", (dirs, 4 * hidden, width)),
                                                      ("r", (dirs, 4 * hidden, hidden)),
                                                      ("b", (dirs, 8 * hidden)))]
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(model(nodes, [("x", [7, "batch", width])], [("z", None)], inits, opset=17), src)
    quantize_dynamic(str(src), str(dst), op_types_to_quantize=["LSTM"])
    q = onnx.load(str(dst))
    assert "DynamicQuantizeLSTM" in {n.op_type for n in q.graph.node}
    ran = run_shapes(q, {"x": np.zeros((7, 3, width), np.float32)})
    g = extract(q, dims={"batch": 3})
    ours = _edge_shapes(g)
    assert g.unknown_ops == [] and ours["t"] == ran["t"] == (7, 3, dirs, hidden)
    lstm = extract(src, dims={"batch": 3})
    assert g.u[layout.GLOBAL_COLUMNS.index("flops_total")] == \
        lstm.u[layout.GLOBAL_COLUMNS.index("flops_total")]


def test_qattention_is_typed_as_attention_with_float_outputs():
    hidden, heads = 16, 2
    inits = [const("w", (8, 3 * hidden), np.ones((8, 3 * hidden)), dtype=np.uint8),
             const("b", (3 * hidden,)), const("xs", (), 0.1), const("ws", (), 0.1),
             const("xz", (), 0, dtype=np.uint8), const("wz", (), 0, dtype=np.uint8)]
    node = helper.make_node("QAttention", ["x", "w", "b", "xs", "ws", "", "xz", "wz"], ["y"],
                            domain="com.microsoft", num_heads=heads)
    m = model([node, helper.make_node("Relu", ["y"], ["z"])],
              [("x", ["batch", "seq", 8], onnx.TensorProto.UINT8)], [("z", None)], inits,
              opset=17, domains=("com.microsoft",))
    ran = run_shapes(m, {"x": np.ones((2, 5, 8), np.uint8)})
    g = extract(m, dims={"batch": 2, "seq": 5})
    assert g.unknown_ops == []
    assert _edge_shapes(g) == {"y": ran["y"]} == {"y": (2, 5, hidden)}


def test_an_op_without_a_shape_rule_is_guessed_and_says_so():
    m = model([helper.make_node("MyOp", ["x"], ["y"], domain="com.example"),
               helper.make_node("Relu", ["y"], ["z"])],
              [("x", ["batch", 4])], [("z", None)], domains=("com.example",))
    g = extract(m, batch=2)
    assert _edge_shapes(g) == {"y": (2, 4)}  # the documented guess: its first input's shape
    assert g.unknown_ops == ["MyOp"]
    assert any(w.startswith("the output shapes of 1 node(s) of ops without a shape rule (MyOp)")
               for w in g.warnings)
    ruled = extract(_small_cnn(), batch=2)  # every op has a rule: no such warning
    assert not any("without a shape rule" in w for w in ruled.warnings)


def _moe_layer(k: int = 2, experts: int = 4, hidden: int = 16, inter: int = 32):
    """onnxruntime's MoE op as onnxruntime-genai's GPT-OSS build writes it:
    a router's logits, fc1 (gate and up fused, SwiGLU) and fc2 banks."""
    nodes = [helper.make_node("MatMul", ["x", "router_w"], ["logits"]),
             helper.make_node("MoE", ["x", "logits", "fc1", "fc1_b", "fc2", "fc2_b"], ["y"],
                              domain="com.microsoft", k=k, activation_type="swiglu",
                              swiglu_fusion=1, normalize_routing_weights=1)]
    inits = [const("router_w", (hidden, experts)), const("fc1", (experts, 2 * inter, hidden)),
             const("fc1_b", (experts, 2 * inter)), const("fc2", (experts, hidden, inter)),
             const("fc2_b", (experts, hidden))]
    return model(nodes, [("x", ["tokens", hidden])], [("y", None)], inits, opset=17,
                 domains=("com.microsoft",))


def test_moe_costs_each_token_through_its_k_experts():
    """Each of the tokens' k expert slots runs fc1 (2 x inter wide, fused
    SwiGLU) and fc2: 2 FLOPs per weight element of one expert, its
    activation, and the router's softmax and top-k. Before, 1 FLOP per
    output element and an assumed shape (the implied KV dims of a genai
    GPT-OSS build failed with it)."""
    from perfseer_rt.graph.ops import MOE_ACTIVATION_FLOPS, MOE_ROUTING_FLOPS

    g = extract(_moe_layer(), dims={"tokens": 10})
    assert g.unknown_ops == [] and not any("without a shape rule" in w for w in g.warnings)
    flops = dict(zip(g.node_ops, g.node_column("flops")))
    per_slot = 2 * (2 * 32 * 16 + 16 * 32) + MOE_ACTIVATION_FLOPS * 2 * 32
    assert flops["MoE"] == 10 * 2 * per_slot + MOE_ROUTING_FLOPS * 10 * 4
    ran = run_shapes(_moe_layer(), {"x": np.ones((10, 16), np.float32)})
    assert _edge_shapes(g)["logits"] == ran["logits"] == (10, 4)
    assert ran["y"] == (10, 16)
