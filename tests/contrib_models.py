"""Models made of onnxruntime contrib ops (domain com.microsoft), for
tests/test_contrib_ops.py: a LLaMA-style int4 decoder layer as
onnxruntime's GenAI model builder writes it, a BERT-style layer as its
transformer optimizer writes it, and the means to run them in onnxruntime
and read every intermediate tensor's shape."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

MS = "com.microsoft"


def llama_block(heads=4, kv_heads=2, head=16, vocab=64, inter=96, bits=4, block=16):
    """Embedding (GatherBlockQuantized), RMS norms, int4 projections
    (MatMulNBits), GroupQueryAttention with rotary and a KV cache, SwiGLU MLP."""
    hidden = heads * head
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(arr, name))
        return name

    def nbits(name, x, k, n, out):
        blocks = (k + block - 1) // block
        const(f"{name}.qweight", rng.integers(0, 255, (n, blocks, block * bits // 8), dtype=np.uint8))
        const(f"{name}.scales", (rng.random(n * blocks) * 0.01).astype(np.float32))
        nodes.append(helper.make_node("MatMulNBits", [x, f"{name}.qweight", f"{name}.scales"], [out],
                                      domain=MS, K=k, N=n, bits=bits, block_size=block, name=name))

    const("emb.q", rng.integers(0, 255, (vocab, hidden // 2), dtype=np.uint8))
    const("emb.s", (rng.random((vocab, hidden // block)) * 0.01).astype(np.float32))
    nodes.append(helper.make_node("GatherBlockQuantized", ["emb.q", "input_ids", "emb.s"], ["h0"], domain=MS,
                                  gather_axis=0, quantize_axis=1, block_size=block, bits=4, name="embed"))
    const("ln1.w", np.ones(hidden, np.float32))
    nodes.append(helper.make_node("SimplifiedLayerNormalization", ["h0", "ln1.w"], ["n1"], axis=-1,
                                  epsilon=1e-5, name="ln1"))
    nbits("q_proj", "n1", hidden, hidden, "q")
    nbits("k_proj", "n1", hidden, kv_heads * head, "k")
    nbits("v_proj", "n1", hidden, kv_heads * head, "v")
    const("cos", rng.random((256, head // 2)).astype(np.float32))
    const("sin", rng.random((256, head // 2)).astype(np.float32))
    nodes.append(helper.make_node(
        "GroupQueryAttention",
        ["q", "k", "v", "past_key", "past_value", "seqlens_k", "total_seq_len", "cos", "sin"],
        ["attn", "present_key", "present_value"], domain=MS, num_heads=heads, kv_num_heads=kv_heads,
        do_rotary=1, name="gqa"))
    nbits("o_proj", "attn", hidden, hidden, "o")
    const("ln2.w", np.ones(hidden, np.float32))
    nodes.append(helper.make_node("SkipSimplifiedLayerNormalization", ["o", "h0", "ln2.w"],
                                  ["n2", "", "", "res"], domain=MS, epsilon=1e-5, name="ln2"))
    nbits("gate", "n2", hidden, inter, "g")
    nbits("up", "n2", hidden, inter, "u")
    nodes.append(helper.make_node("Sigmoid", ["g"], ["gs"]))
    nodes.append(helper.make_node("Mul", ["g", "gs"], ["silu"]))
    nodes.append(helper.make_node("Mul", ["silu", "u"], ["gu"]))
    nbits("down", "gu", inter, hidden, "d")
    nodes.append(helper.make_node("Add", ["d", "res"], ["h1"]))
    nbits("lm_head", "h1", hidden, vocab, "logits")
    vi = helper.make_tensor_value_info
    cache = ["batch", kv_heads, "past", head]
    ins = [vi("input_ids", TP.INT64, ["batch", "seq"]), vi("past_key", TP.FLOAT, cache),
           vi("past_value", TP.FLOAT, cache), vi("seqlens_k", TP.INT32, ["batch"]),
           vi("total_seq_len", TP.INT32, [])]
    outs = [vi(n, TP.FLOAT, None) for n in ("logits", "present_key", "present_value")]
    g = helper.make_graph(nodes, "llama_block", ins, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    m.ir_version = 9
    return m


def llama_feeds(batch, seq, past, kv_heads=2, head=16):
    cache = np.zeros((batch, kv_heads, past, head), np.float32)
    return {"input_ids": np.ones((batch, seq), np.int64), "past_key": cache, "past_value": cache,
            "seqlens_k": np.full(batch, past + seq - 1, np.int32),
            "total_seq_len": np.array(past + seq, np.int32)}


def bert_layer(hidden=32, heads=4, seq_vocab=50, inter=64):
    """EmbedLayerNormalization, a fused Attention (input projection inside),
    SkipLayerNormalization, FusedMatMul with a transposed weight, BiasGelu,
    and a MultiHeadAttention over the result."""
    rng = np.random.default_rng(1)
    inits, nodes = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(arr, name))
        return name

    f32 = np.float32
    const("word", rng.random((seq_vocab, hidden)).astype(f32))
    const("pos", rng.random((128, hidden)).astype(f32))
    const("seg", rng.random((2, hidden)).astype(f32))
    const("g", np.ones(hidden, f32))
    const("b", np.zeros(hidden, f32))
    nodes.append(helper.make_node("EmbedLayerNormalization", ["ids", "segs", "word", "pos", "seg", "g", "b", "mask"],
                                  ["emb", "mask_index"], domain=MS, epsilon=1e-5, name="embed"))
    const("qkv_w", rng.random((hidden, 3 * hidden)).astype(f32))
    const("qkv_b", np.zeros(3 * hidden, f32))
    nodes.append(helper.make_node("Attention", ["emb", "qkv_w", "qkv_b", "mask_index"], ["att"],
                                  domain=MS, num_heads=heads, name="attention"))
    nodes.append(helper.make_node("SkipLayerNormalization", ["att", "emb", "g", "b"], ["ln"],
                                  domain=MS, epsilon=1e-5, name="skipln"))
    const("w1t", rng.random((inter, hidden)).astype(f32))
    nodes.append(helper.make_node("FusedMatMul", ["ln", "w1t"], ["up"], domain=MS, transB=1, alpha=1.0,
                                  name="fusedmm"))
    const("b1", np.zeros(inter, f32))
    nodes.append(helper.make_node("BiasGelu", ["up", "b1"], ["act"], domain=MS, name="biasgelu"))
    const("w2", rng.random((inter, hidden)).astype(f32))
    nodes.append(helper.make_node("MatMul", ["act", "w2"], ["down"], name="down"))
    nodes.append(helper.make_node("MultiHeadAttention", ["down", "down", "down"], ["y"], domain=MS,
                                  num_heads=heads, name="mha"))
    vi = helper.make_tensor_value_info
    ins = [vi("ids", TP.INT32, ["batch", "seq"]), vi("segs", TP.INT32, ["batch", "seq"]),
           vi("mask", TP.INT32, ["batch", "seq"])]
    g = helper.make_graph(nodes, "bert_layer", ins, [vi("y", TP.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    m.ir_version = 9
    return m


def bert_feeds(batch, seq):
    ids = np.ones((batch, seq), np.int32)
    return {"ids": ids, "segs": np.zeros_like(ids), "mask": ids}


def run_shapes(model: onnx.ModelProto, feeds: dict, chunk: int | None = None) -> dict:
    """Every tensor node output's shape when onnxruntime runs ``model`` on
    ``feeds`` (with ``chunk``: that many outputs a run, so that a large model's
    activations are not all held at once)."""
    wanted = list(dict.fromkeys(o for n in model.graph.node for o in n.output if o))
    shapes: dict = {}
    step = chunk or max(len(wanted), 1)
    for start in range(0, max(len(wanted), 1), step):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        have = {o.name for o in m.graph.output}
        for name in wanted[start:start + step]:
            if name not in have:
                m.graph.output.append(onnx.ValueInfoProto(name=name))
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        shapes.update((n, v.shape) for n, v in zip(names, sess.run(None, feeds))
                      if isinstance(v, np.ndarray))  # a sequence comes back as a list
    return shapes
