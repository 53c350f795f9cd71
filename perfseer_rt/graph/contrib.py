"""Output shapes of onnxruntime's contrib ops (domain ``com.microsoft``).

onnx has no schema for these ops, so neither its shape inference nor the
pass of :mod:`perfseer_rt.graph.propagate` could type their outputs; the
generic guess (outputs shaped like the first input) is wrong for the ops
that change a tensor's width. Real models carry them: int4/int8 weight-only
LLMs (``MatMulNBits``, ``GatherBlockQuantized``, ``GroupQueryAttention``,
``RotaryEmbedding``, ``SkipSimplifiedLayerNormalization``, as written by
onnxruntime's quantizers and its GenAI model builder) and models saved by
onnxruntime's transformer optimizer (``Attention``, ``MultiHeadAttention``,
``EmbedLayerNormalization``, ``SkipLayerNormalization``, ``FusedMatMul``,
``BiasGelu``...). The rules follow onnxruntime's contrib op documentation
(``docs/ContribOperators.md``); each has the signature of a
:data:`~perfseer_rt.graph.propagate.Rule` and returns None where its inputs
are not known well enough (the op is then left to the generic guess).

Attention caches: a ``present`` output holds the past plus the new tokens
(``past_sequence_length + sequence_length``), which is what a cache that is
not shared with its input holds (GroupQueryAttention's ``total_sequence_length``
is a run-time value: past plus new tokens is assumed).
"""

from __future__ import annotations

from perfseer_rt.graph.nodes import Attrs
from perfseer_rt.graph.propagate import RULES, GiveUp, Result, Rule, Shape, Types, ValueOf

MS_DOMAIN = "com.microsoft"
FLOAT, INT32 = 1, 6


def _x(ins: Types, i: int) -> tuple[int, Shape] | None:
    return ins[i] if len(ins) > i else None


def _int(attrs: Attrs, name: str, default: int | None = None, lo: int = 1) -> int:
    """An integer attribute in ``lo..2^40`` (GiveUp otherwise: the rule cannot type the node)."""
    v = attrs.get(name, default)
    if type(v) is not int or not lo <= v < 1 << 40:
        raise GiveUp(f"attribute {name}")
    return v


def _same(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    x = _x(ins, 0)
    return None if x is None else [x]


def _matmul_nbits(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    """MatMulNBits / MatMulBnb4: A [..., K] times a packed [K, N] weight (attributes K, N)."""
    a = _x(ins, 0)
    if a is None or not a[1] or a[1][-1] != _int(attrs, "K"):
        return None
    return [(a[0], a[1][:-1] + (_int(attrs, "N"),))]


def _matmul_shape(a: Shape, b: Shape) -> Shape | None:
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    batch = a[:-2] if len(a) >= len(b) else b[:-2]
    if a[:-2] and b[:-2] and a[:-2] != b[:-2]:
        return None  # broadcast batch dims: left to the generic guess
    return batch + (a[-2], b[-1])


def _fused_matmul(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    """FusedMatMul: MatMul with optional transposes of the last two dims (and a scale)."""
    a, b = _x(ins, 0), _x(ins, 1)
    if a is None or b is None:
        return None
    sa, sb = a[1], b[1]
    if len(sa) >= 2 and _int(attrs, "transA", 0, lo=0):
        sa = sa[:-2] + (sa[-1], sa[-2])
    if len(sb) >= 2 and _int(attrs, "transB", 0, lo=0):
        sb = sb[:-2] + (sb[-1], sb[-2])
    out = _matmul_shape(sa, sb)
    return None if out is None else [(a[0], out)]


def _quantized_matmul(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    """DynamicQuantizeMatMul / MatMulIntegerToFloat: a MatMul whose output is
    float (MatMulIntegerToFloat: the type of ``a_scale``)."""
    a, b = _x(ins, 0), _x(ins, 1)
    if a is None or b is None:
        return None
    out = _matmul_shape(a[1], b[1])
    scale = _x(ins, 2)
    elem = a[0] if a[0] in (FLOAT, 10, 16) else scale[0] if scale is not None else FLOAT
    return None if out is None else [(elem, out)]


def _quantized_lstm(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    """DynamicQuantizeLSTM (onnxruntime's dynamic quantizer's LSTM): X
    ``[seq, batch, I]``; LSTM's outputs Y ``[seq, directions, batch, H]``,
    Y_h and Y_c ``[directions, batch, H]``."""
    x = _x(ins, 0)
    if x is None or len(x[1]) != 3:
        return None
    hidden = _int(attrs, "hidden_size")
    direction = attrs.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        return None
    dirs = 2 if direction == "bidirectional" else 1
    seq, batch = x[1][0], x[1][1]
    state = (x[0], (dirs, batch, hidden))
    return [(x[0], (seq, dirs, batch, hidden)), state, state][:n_out]


def _present(past: tuple[int, Shape] | None, new_len: int, axis: int) -> tuple[int, Shape] | None:
    """A KV-cache output from its past input: ``new_len`` more positions along ``axis``."""
    if past is None or len(past[1]) <= axis:
        return None
    shape = list(past[1])
    shape[axis] += new_len
    return (past[0], tuple(shape))


def gqa_head_size(ins: Types, attrs: Attrs) -> int | None:
    """The head size of a GroupQueryAttention node: its key's width over
    ``kv_num_heads``, or, with Q, K and V packed in the query, the query's
    width over ``num_heads + 2 * kv_num_heads`` (None where the inputs are
    not known or do not divide). A KV cache's last dim is this size unless
    the cache is quantized."""
    q, key = _x(ins, 0), _x(ins, 1)
    heads, kv_heads = _int(attrs, "num_heads"), _int(attrs, "kv_num_heads")
    if key is not None and len(key[1]) == 3:
        width, parts = key[1][2], kv_heads
    elif q is not None and len(q[1]) == 3:
        width, parts = q[1][2], heads + 2 * kv_heads
    else:
        return None
    return width // parts if width % parts == 0 else None


def _gqa(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    """GroupQueryAttention(query, key, value, past_key, past_value, seqlens_k,
    total_sequence_length, cos_cache, sin_cache): output [B, S, num_heads *
    head_size]; present key/value [B, kv_num_heads, T, D], D the past's last
    dim (head_size, or a quantized cache's width) or, with no past, head_size;
    T the past's length plus the new tokens, or, for a sliding-window cache
    (``sliding_window_cache``: a window-sized buffer), the past's length."""
    q = _x(ins, 0)
    head = gqa_head_size(ins, attrs)
    if q is None or len(q[1]) != 3 or head is None:
        return None
    heads, kv_heads = _int(attrs, "num_heads"), _int(attrs, "kv_num_heads")
    b, s, _ = q[1]
    past = _x(ins, 3)
    out: list[tuple[int, Shape]] = [(q[0], (b, s, heads * head))]
    if n_out > 1:
        if past is None:
            present: tuple[int, Shape] | None = (q[0], (b, kv_heads, s, head))
        elif attrs.get("sliding_window_cache") == 1:  # a window-sized buffer, rolled in place
            present = past
        else:
            present = _present(past, s, 2)
        if present is None:
            return None
        out += [present] * min(n_out - 1, 2)
    return out


def _attention(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    """Attention(input [B, S, in], weights [in, q + k + v], bias, mask, past
    [2, B, heads, P, head]): output [B, S, v]; present [2, B, heads, P + S, head]."""
    x, w = _x(ins, 0), _x(ins, 1)
    if x is None or w is None or len(x[1]) != 3 or len(w[1]) != 2:
        return None
    sizes = attrs.get("qkv_hidden_sizes")
    v_width = int(sizes[2]) if isinstance(sizes, list) and len(sizes) == 3 else w[1][1] // 3
    out: list[tuple[int, Shape]] = [(x[0], x[1][:2] + (v_width,))]
    if n_out > 1:
        heads = _int(attrs, "num_heads")
        past = _x(ins, 4)
        if past is not None and len(past[1]) == 5:
            present = _present(past, x[1][1], 3)
        else:
            present = (x[0], (2, x[1][0], heads, x[1][1], v_width // heads))
        if present is None:
            return None
        out.append(present)
    return out


def _mha(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    """MultiHeadAttention(query [B, S, D], key, value, bias, mask, bias,
    past_key, past_value): output [B, S, D_v]; present [B, heads, P + S_kv, head]."""
    q = _x(ins, 0)
    if q is None or len(q[1]) != 3:
        return None
    value = _x(ins, 2)
    d_v = value[1][2] if value is not None and len(value[1]) == 3 else q[1][2]
    out: list[tuple[int, Shape]] = [(q[0], q[1][:2] + (d_v,))]
    if n_out > 1:
        key = _x(ins, 1)
        s_kv = key[1][1] if key is not None and len(key[1]) == 3 else q[1][1]
        presents = [_present(_x(ins, i), s_kv, 2) for i in (6, 7)]
        if any(p is None for p in presents[:n_out - 1]):
            return None
        out += [p for p in presents[:n_out - 1] if p is not None]
    return out


def _skip_norm(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    """(Skip)(Simplified)LayerNormalization: output like the input; the optional
    mean / inverse std dev are [..., 1] float, the optional sum like the input."""
    x = _x(ins, 0)
    if x is None or not x[1]:
        return None
    stat = (FLOAT, x[1][:-1] + (1,))
    skip = n_out == 4  # Skip*: (output, mean, inv_std_var, input_skip_bias_sum)
    rest = [stat, stat, x] if skip else [stat, stat]
    return [x, *rest][:n_out]


def _gather_block_quantized(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int
                            ) -> Result:
    """GatherBlockQuantized(data, indices, scales, zero_points): a Gather of a
    block-quantized table (4-bit values packed two per uint8 byte along the
    quantized axis), dequantized to the type of ``scales``."""
    data, idx, scales = _x(ins, 0), _x(ins, 1), _x(ins, 2)
    if data is None or idx is None or scales is None or not data[1]:
        return None
    rank = len(data[1])
    axis, q_axis = attrs.get("gather_axis", 0), attrs.get("quantize_axis", rank - 1)
    if type(axis) is not int or type(q_axis) is not int or not (
            -rank <= axis < rank and -rank <= q_axis < rank):
        return None
    axis, q_axis = axis % rank, q_axis % rank
    shape = list(data[1])
    if data[0] == 2 and _int(attrs, "bits", 4) == 4:  # uint8 holding two 4-bit values
        shape[q_axis] *= 2
    return [(scales[0], tuple(shape[:axis]) + idx[1] + tuple(shape[axis + 1:]))]


def _embed_layer_norm(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    """EmbedLayerNormalization(input_ids [B, S], segment_ids, word_embedding [V, H], ...):
    output and embedding sum [B, S, H]; mask_index [B] int32."""
    ids, emb = _x(ins, 0), _x(ins, 2)
    if ids is None or emb is None or len(ids[1]) != 2 or len(emb[1]) != 2:
        return None
    out = (emb[0], ids[1] + (emb[1][1],))
    return [out, (INT32, ids[1][:1]), out][:n_out]


def _standard(op: str) -> Rule:
    """The pass's rule of standard op ``op`` (:data:`perfseer_rt.graph.propagate.RULES`)."""
    return RULES[op][0]


def _qlinear_binary(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    """QLinearAdd / QLinearMul (A, A_scale, A_zp, B, B_scale, B_zp, C_scale,
    C_zp): A and B broadcast, A's element type."""
    return _standard("Add")([_x(ins, 0), _x(ins, 3)], val, {}, n_out, 14)


def _qlinear_pool(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    """QLinearGlobalAveragePool / QLinearAveragePool (X, X_scale, X_zp,
    Y_scale, Y_zp): the float pool's shape (channels-first only: None for
    ``channels_last``)."""
    if attrs.get("channels_last", 0):
        return None
    rest = {k: v for k, v in attrs.items() if k != "channels_last"}
    if "kernel_shape" in attrs:
        return _standard("AveragePool")([_x(ins, 0)], val, rest, 1, 11)
    return _standard("GlobalAveragePool")([_x(ins, 0)], val, rest, 1, 1)


def _qlinear_concat(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    """QLinearConcat (Y_scale, Y_zp, then X, X_scale, X_zp per input): the Xs concatenated."""
    return _standard("Concat")(list(ins[2::3]), val, attrs, n_out, 13)


def _qgemm(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    """QGemm (A, A_scale, A_zp, B, B_scale, B_zp, C, Y_scale, Y_zp): the
    Gemm's shape; quantized like A with a Y_scale, float32 without."""
    out = _standard("Gemm")([_x(ins, 0), _x(ins, 3)], val, attrs, n_out, 13)
    if out is None or out[0] is None:
        return None
    elem = out[0][0] if _x(ins, 7) is not None else FLOAT
    return [(elem, out[0][1])]


def _qattention(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    """QAttention (input, weight, bias, input_scale, weight_scale, mask_index,
    input_zp, weight_zp, past): Attention's shapes, float32 outputs."""
    out = _attention([_x(ins, 0), _x(ins, 1), _x(ins, 2), _x(ins, 5), _x(ins, 8)], val, attrs,
                     n_out, since)
    return None if out is None else [(FLOAT, t[1]) for t in out]


#: ONNX's removed experimental elementwise ops (shaped like their input).
_EXPERIMENTAL_ELEMENTWISE = ("ImageScaler", "Affine", "Scale", "ScaledTanh", "ParametricSoftplus")


def _crop(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    """Crop (removed experimental op) of an NCHW input: ``border`` is
    (left, top, right, bottom); ``scale`` (height, width), when given, is the
    output's size from the top-left border on (as onnxruntime runs it)."""
    x = _x(ins, 0)
    border, scale = attrs.get("border"), attrs.get("scale")
    if x is None or len(x[1]) != 4 or type(border) is not list or len(border) != 4:
        return None
    n, c, h, w = x[1]
    left, top, right, bottom = border
    if scale:
        if type(scale) is not list or len(scale) != 2:
            return None
        oh, ow = scale
        right, bottom = w - left - ow, h - top - oh
    else:
        oh, ow = h - top - bottom, w - left - right
    if min(left, top, right, bottom) < 0 or oh < 1 or ow < 1:
        return None
    return [(x[0], (n, c, oh, ow))]


#: op type (domain com.microsoft) -> shape rule.
CONTRIB_RULES: dict[str, Rule] = {
    "MatMulNBits": _matmul_nbits, "MatMulBnb4": _matmul_nbits,
    "FusedMatMul": _fused_matmul,
    "DynamicQuantizeMatMul": _quantized_matmul, "MatMulIntegerToFloat": _quantized_matmul,
    "DynamicQuantizeLSTM": _quantized_lstm,
    "GroupQueryAttention": _gqa, "Attention": _attention, "MultiHeadAttention": _mha,
    "SkipLayerNormalization": _skip_norm, "SkipSimplifiedLayerNormalization": _skip_norm,
    "SimplifiedLayerNormalization": _skip_norm,
    "GatherBlockQuantized": _gather_block_quantized,
    "EmbedLayerNormalization": _embed_layer_norm,
    **{op: _same for op in ("RotaryEmbedding", "BiasGelu", "FastGelu", "QuickGelu", "Gelu",
                            "BiasAdd", "BiasDropout", "MoE", "QMoE")},
    # onnxruntime's static quantizer, QOperator format
    "QLinearAdd": _qlinear_binary, "QLinearMul": _qlinear_binary,
    # QLinearLeakyRelu / Sigmoid / Softmax (X, X_scale, X_zp, Y_scale, Y_zp): shaped like X
    **{op: _same for op in ("QLinearLeakyRelu", "QLinearSigmoid", "QLinearSoftmax")},
    "QLinearGlobalAveragePool": _qlinear_pool, "QLinearAveragePool": _qlinear_pool,
    "QLinearConcat": _qlinear_concat, "QGemm": _qgemm, "QAttention": _qattention,
    # ONNX's removed experimental ops, which old files hold (the ONNX model
    # zoo's Tiny YOLOv2: ImageScaler) and onnxruntime still runs
    **{op: _same for op in _EXPERIMENTAL_ELEMENTWISE}, "Crop": _crop,
}


#: Contrib ops onnxruntime registers in the ONNX domain (onnx has no schema for them).
ONNX_DOMAIN_CONTRIB = frozenset({"SimplifiedLayerNormalization", *_EXPERIMENTAL_ELEMENTWISE, "Crop"})


def contrib_rule(domain: str, op: str) -> Rule | None:
    """The shape rule of a contrib op (domain com.microsoft, or one of
    :data:`ONNX_DOMAIN_CONTRIB` in the ONNX domain), or None."""
    if domain == MS_DOMAIN or domain in ("", "ai.onnx") and op in ONNX_DOMAIN_CONTRIB:
        return CONTRIB_RULES.get(op)
    return None
