"""Op cost rules: FLOPs and hyper-parameters of every ONNX operator.

This module is the one place where counting conventions live. Memory access
cost (MAC) and weight size are computed the same way for every op (see
:func:`perfseer_rt.graph.extract`): MAC = bytes of the data inputs + bytes of
the weights + bytes of the outputs; weights are the constant (initializer or
folded) inputs of a node, except the *parameter inputs* listed in
:data:`PARAM_INPUTS` (shapes, axes, pads, scales...), which are neither data
nor weights.

FLOP conventions (one multiply-add = 2 FLOPs):

=====================================  ==========================================
op                                     FLOPs
=====================================  ==========================================
Conv                                   2 * out_elems * (C_in / groups) * prod(kernel)
                                       + out_elems if a bias is given
ConvTranspose                          2 * in_elems * (C_out / groups) * prod(kernel)
                                       + out_elems if a bias is given
Gemm                                   2 * M * N * K (+ M * N with C)
MatMul                                 2 * out_elems * K
Einsum                                 2 * product of the sizes of every index
                                       letter (one operand: the product)
Attention (ONNX, com.microsoft MHA)    2 * 2 * B * heads * S_q * S_kv * head_dim
                                       + 5 * B * heads * S_q * S_kv (softmax)
BatchNormalization                     2 * out_elems (inference: scale and shift)
LayerNormalization                     5 * elems, + 1 per element for scale and
                                       for bias (7 with both)
Instance/GroupNormalization            same as LayerNormalization
Softmax / LogSoftmax                   5 * elems (max, sub, exp, sum, div)
MaxPool / AveragePool / LpPool         out_elems * prod(kernel)
GlobalAverage/MaxPool, Reduce*,        in_elems
ArgMax/ArgMin
element-wise ops                       out_elems * the per-element count in
                                       :data:`ELEMENTWISE_FLOPS` (1 for most;
                                       variadic Sum/Max/Min/Mean: (n-1) * out)
Resize / Upsample                      0 for nearest, 4 * out_elems for linear,
                                       16 * out_elems for cubic
data movement (Reshape, Transpose,     0
Concat, Split, Slice, Gather, Pad,
Expand, Cast, Identity, Dropout, ...)
anything else (unknown op)             out_elems (1 per output element), and
                                       the op is reported as unknown
=====================================  ==========================================

Differences to onnx-tool (used as a cross-check in the tests): onnx-tool
counts MACs (multiply-accumulates), so its totals are compared after
multiplying by 2; it counts element-wise ops and normalizations with its own
per-element constants, so whole-model totals agree within a few percent on
CNNs (dominated by Conv) and transformers (dominated by MatMul) and not to
the FLOP; see ``tests/test_crosscheck_onnx_tool.py`` for the measured gaps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfseer_rt.errors import GraphError, ShapeError
from perfseer_rt.graph import dtypes
from perfseer_rt.graph.limits import MAX_SPATIAL_ATTR
from perfseer_rt.graph.recurrent import recurrent_flops


class TensorInfo:
    """A tensor's resolved static shape and element size in bytes.

    ``elems`` (element count) and ``nbytes`` (bytes) are computed once at
    construction: the extractor reads them several times per node.
    """

    __slots__ = ("name", "shape", "itemsize", "elems", "nbytes")

    def __init__(self, name: str, shape: tuple[int, ...], itemsize: float,
                 elems: int | None = None):
        self.name = name
        self.shape = shape
        self.itemsize = itemsize  # bytes per element; 0.5 for 4-bit types
        self.elems = int(math.prod(shape)) if elems is None else elems  # given: already counted
        self.nbytes = self.elems * itemsize

    def __repr__(self) -> str:
        return f"TensorInfo({self.name!r}, {self.shape!r}, {self.itemsize!r})"


#: A node's attributes as plain values (:mod:`perfseer_rt.graph.nodes`).
Attrs = dict[str, Any]
#: One TensorInfo per input position (None: an absent optional input, or a
#: parameter input) and one per output.
Ins = Sequence["TensorInfo | None"]
Outs = Sequence["TensorInfo"]


def _t(t: TensorInfo | None) -> TensorInfo:
    """``t``, which a rule needs: an absent tensor raises AttributeError
    (as reading it would), which :func:`node_cost` turns into the generic cost."""
    if t is None:
        raise AttributeError("a tensor the rule needs is absent")
    return t


@dataclass
class NodeCost:
    """What a cost rule returns: FLOPs plus named hyper-parameters."""

    flops: float = 0.0
    hparams: dict[str, float] = field(default_factory=dict)


#: Per op type, the input positions that are parameters (not data, not weights).
PARAM_INPUTS: dict[str, frozenset[int]] = {
    "Reshape": frozenset({1}),
    "Expand": frozenset({1}),
    "Tile": frozenset({1}),
    "Slice": frozenset({1, 2, 3, 4}),
    "Pad": frozenset({1, 2, 3}),
    "Resize": frozenset({1, 2, 3}),
    "Upsample": frozenset({1}),
    "Squeeze": frozenset({1}),
    "Unsqueeze": frozenset({1}),
    "Split": frozenset({1}),
    "ReduceMean": frozenset({1}), "ReduceSum": frozenset({1}),
    "ReduceMax": frozenset({1}), "ReduceMin": frozenset({1}),
    "ReduceProd": frozenset({1}), "ReduceL2": frozenset({1}),
    "ReduceL1": frozenset({1}), "ReduceLogSumExp": frozenset({1}),
    "ReduceSumSquare": frozenset({1}),
    "TopK": frozenset({1}),
    "ConstantOfShape": frozenset({0}),
    "Range": frozenset({0, 1, 2}),
    "OneHot": frozenset({1}),
    "Clip": frozenset({1, 2}),
    "CumSum": frozenset({1}),
    "Trilu": frozenset({1}),
    # quantized ops: scales and zero points are parameters
    "QLinearConv": frozenset({1, 2, 4, 5, 6, 7}),
    "QLinearMatMul": frozenset({1, 2, 4, 5, 6, 7}),
    "MatMulInteger": frozenset({2, 3}), "ConvInteger": frozenset({2, 3}),
    "QuantizeLinear": frozenset({1, 2}), "DequantizeLinear": frozenset({1, 2}),
    "DynamicQuantizeMatMul": frozenset({2, 3}),
    "GroupQueryAttention": frozenset({5, 6}),  # seqlens_k, total_sequence_length
    "MatMulIntegerToFloat": frozenset({2, 3, 4, 5}),
    "QLinearAdd": frozenset({1, 2, 4, 5, 6, 7}), "QLinearMul": frozenset({1, 2, 4, 5, 6, 7}),
    **{op: frozenset({1, 2, 3, 4}) for op in (
        "QLinearLeakyRelu", "QLinearSigmoid", "QLinearSoftmax", "QLinearGlobalAveragePool",
        "QLinearAveragePool")},
    # Y_scale, Y_zp, then each input's scale and zero point
    "QLinearConcat": frozenset({0, 1} | {i for i in range(2, 3 * 1024) if (i - 2) % 3}),
    "QGemm": frozenset({1, 2, 4, 5, 7, 8}),
    "QAttention": frozenset({3, 4, 6, 7}),
}

#: FLOPs per output element of element-wise ops.
ELEMENTWISE_FLOPS: dict[str, int] = {
    **{op: 1 for op in (
        "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Neg", "Abs", "Reciprocal",
        "Sqrt", "Exp", "Log", "Erf", "Relu", "Floor", "Ceil", "Round", "Sign",
        "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And",
        "Or", "Xor", "Not", "Where", "IsNaN", "IsInf", "Sin", "Cos", "BitShift",
        "Sum", "Max", "Min", "Mean", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
        "Acosh", "Atanh", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot")},
    "Shrink": 2, "Swish": 5, "SwiGLU": 6,
    # random generators: a few operations per value drawn
    **{op: 2 for op in ("RandomNormal", "RandomNormalLike", "RandomUniform",
                        "RandomUniformLike", "Bernoulli")},
    "LeakyRelu": 2, "PRelu": 2, "Clip": 2, "Elu": 3, "Selu": 3, "Celu": 3,
    "ThresholdedRelu": 1, "HardSigmoid": 3, "HardSwish": 4, "Sigmoid": 4,
    "Tanh": 4, "Softplus": 3, "Softsign": 3, "Mish": 8, "Gelu": 8,
    "QuickGelu": 5, "FastGelu": 8, "BiasGelu": 9,
    "RotaryEmbedding": 3, "BiasAdd": 2, "BiasDropout": 2,
    # ONNX's removed experimental ops that onnxruntime still runs
    "ImageScaler": 2, "Affine": 2, "Scale": 1, "ScaledTanh": 6, "ParametricSoftplus": 5,
}

#: Ops that only move or re-view data: 0 FLOPs.
DATA_MOVEMENT: frozenset[str] = frozenset({
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat",
    "Split", "Slice", "Gather", "GatherElements", "GatherND", "ScatterND",
    "ScatterElements", "Expand", "Tile", "Pad", "Identity", "Dropout", "Cast",
    "CastLike", "Shape", "Size", "DepthToSpace", "SpaceToDepth", "Constant",
    "ConstantOfShape", "Range", "NonZero", "Compress", "OneHot", "Trilu",
    "ReverseSequence", "EyeLike", "SplitToSequence", "ConcatFromSequence",
    "MaxUnpool", "CenterCropPad", "Crop", "BitCast", "Optional", "OptionalGetElement",
    "OptionalHasElement", "SequenceAt", "SequenceLength", "SequenceConstruct", "SequenceEmpty",
    "SequenceInsert", "SequenceErase",
})

_VARIADIC = frozenset({"Sum", "Max", "Min", "Mean"})
_NORMS = frozenset({"LayerNormalization", "InstanceNormalization", "LpNormalization",
                    "MeanVarianceNormalization",
                    "GroupNormalization", "SimplifiedLayerNormalization",
                    "SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
                    "EmbedLayerNormalization", "RMSNormalization"})
_REDUCTIONS = frozenset({"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool",
                         "ArgMax", "ArgMin", "TopK", "CumSum", "CumProd", "Hardmax"})


def cost_kind(op: str) -> str | None:
    """The generic kind of an op's cost, where it has one: ``"element-wise"``
    (:data:`ELEMENTWISE_FLOPS`) or ``"data movement"`` (:data:`DATA_MOVEMENT`);
    None for an op costed by a rule of its own."""
    return "element-wise" if op in ELEMENTWISE_FLOPS else "data movement" if op in DATA_MOVEMENT else None


def channel_dim(shape: tuple[int, ...]) -> int:
    """The "channel" slot of a shape (see :mod:`perfseer_rt.graph.layout`)."""
    r = len(shape)
    if r == 0:
        return 1
    if r == 1:
        return shape[0]
    if r == 3:
        return shape[2]
    return shape[1]


def _check_range(what: str, values: Iterable[Any], lo: int) -> list[int]:
    vals = list(map(int, values))
    if vals and (min(vals) < lo or max(vals) > MAX_SPATIAL_ATTR):
        raise GraphError(f"attribute {what}={vals} is outside {lo}..{MAX_SPATIAL_ATTR}")
    return vals


#: Ops whose spatial attributes :func:`check_spatial_attrs` validates.
SPATIAL_OPS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool",
                         "AveragePool", "LpPool"})


def check_spatial_attrs(attrs: Attrs) -> None:
    """Refuse conv/pool attributes out of range before shape inference sees
    them (GraphError naming the attribute)."""
    for key, lo in (("kernel_shape", 1), ("strides", 1), ("dilations", 1), ("pads", 0)):
        v = attrs.get(key)
        if v is not None:
            _check_range(key, v if isinstance(v, list) else [v], lo)
    if "group" in attrs and not 1 <= int(attrs["group"]) <= 2**31:
        raise GraphError(f"attribute group={attrs['group']} is outside 1..{2**31}")
    if attrs.get("auto_pad", "NOTSET") not in AUTO_PADS:
        raise GraphError(f"attribute auto_pad={attrs['auto_pad']!r} is none of "
                         f"{', '.join(AUTO_PADS)}; onnxruntime refuses such a node")


#: The values ONNX's auto_pad attribute takes.
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _spatial_attrs(attrs: Attrs, kernel: tuple[int, ...]) -> dict[str, float]:
    """kernel/stride/pad/dilation hyper-parameters of a conv or pool.

    Raises:
        GraphError: a kernel, stride or dilation below 1, a negative pad, or
            any of them above MAX_SPATIAL_ATTR.
    """
    k = _check_range("kernel_shape", kernel, 1) + [1, 1]
    nd = len(kernel)
    got = attrs.get("strides")
    strides = ([1] * nd if got is None else _check_range("strides", got, 1)) + [1, 1]
    got = attrs.get("dilations")
    dil = ([1] * nd if got is None else _check_range("dilations", got, 1)) + [1, 1]
    got = attrs.get("pads")
    pads = [0] * (2 * nd) if got is None else _check_range("pads", got, 0)
    begin = pads[:nd] + [0, 0]
    hp: dict[str, float] = {"kernel_h": k[0], "kernel_w": k[1], "stride_h": strides[0],
            "stride_w": strides[1], "pad_h": begin[0], "pad_w": begin[1],
            "dilation_h": dil[0], "dilation_w": dil[1]}
    return hp


def _conv(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    x, w = ins[0], ins[1]
    out = outs[0]
    groups = int(attrs.get("group", 1))
    if groups < 1:
        raise GraphError(f"attribute group={groups} is below 1")
    kernel = tuple(w.shape[2:]) if w is not None else tuple(attrs.get("kernel_shape", ()))
    has_bias = len(ins) > 2 and ins[2] is not None
    if op == "Conv":
        cin_per_group = _t(w).shape[1]
        flops = 2 * out.elems * cin_per_group * math.prod(kernel)
        cin, cout = _t(x).shape[1], _t(w).shape[0]
        _check_conv(cin, cout, cin_per_group, groups, kernel, attrs, out.shape)
    else:  # ConvTranspose: weight is (C_in, C_out / groups, k...)
        flops = 2 * _t(x).elems * _t(w).shape[1] * math.prod(kernel)
        cin, cout = _t(x).shape[1], _t(w).shape[1] * groups
    if has_bias:
        flops += out.elems
    hp = _spatial_attrs(attrs, kernel)
    hp.update(groups=groups, has_bias=int(has_bias), in_channels=cin, out_channels=cout)
    return NodeCost(flops, hp)


def _check_conv(cin: int, cout: int, cin_per_group: int, groups: int, kernel: tuple[int, ...],
                attrs: Attrs, out_shape: tuple[int, ...]) -> None:
    """A Conv whose input, weight and attributes disagree, which onnx's
    shape inference lets through and onnxruntime refuses when it runs: a
    ShapeError (the input shapes decide the input's channels)."""
    if cin != cin_per_group * groups or cout % groups:
        raise ShapeError(f"its input has {cin} channels where its weight, {cout} filters of "
                         f"{cin_per_group} channels in {groups} group(s), takes "
                         f"{cin_per_group * groups}")
    given = attrs.get("kernel_shape")
    if given is not None and tuple(given) != kernel:
        raise ShapeError(f"its kernel_shape {list(given)} is not its weight's {list(kernel)}")
    if any(d < 1 for d in out_shape[2:]):
        raise ShapeError(f"its output would be {list(out_shape)}: the kernel is larger than the "
                         "padded input")


def _gemm(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    a, b = _t(ins[0]), _t(ins[1])
    m, k = (a.shape[1], a.shape[0]) if attrs.get("transA", 0) else (a.shape[0], a.shape[1])
    n = b.shape[0] if attrs.get("transB", 0) else b.shape[1]
    has_bias = len(ins) > 2 and ins[2] is not None
    flops = 2 * m * n * k + (m * n if has_bias else 0)
    return NodeCost(flops, {"has_bias": int(has_bias), "in_channels": k, "out_channels": n})


def _matmul(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    a, b = _t(ins[0]), _t(ins[1])
    k = a.shape[-1] if a.shape else 1
    n = b.shape[-1] if len(b.shape) >= 2 else 1
    return NodeCost(2 * outs[0].elems * k, {"in_channels": k, "out_channels": n})


def _einsum(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    eq = attrs.get("equation", "")
    if isinstance(eq, bytes):
        eq = eq.decode()
    lhs = eq.replace(" ", "").split("->")[0]
    sizes: dict[str, int] = {}
    for term, t in zip(lhs.split(","), ins):
        if t is None or "." in term:
            continue
        for letter, dim in zip(term, t.shape):
            sizes[letter] = dim
    total = math.prod(sizes.values()) if sizes else outs[0].elems
    return NodeCost((2 if len(ins) > 1 else 1) * total)


def _attention(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """Scores and weighted sum (2 MACs per score and head dim) plus softmax
    (5 per score). onnxruntime's contrib ``Attention`` takes the input and
    a 2-D ``[in, q + k + v]`` weight instead of Q, K, V: its projection
    (2 per weight element and token) is counted too."""
    q = _t(ins[0])
    k = _t(ins[1]) if len(ins) > 1 and ins[1] is not None else q
    heads = int(attrs.get("num_heads", attrs.get("q_num_heads", 1)) or 1)
    projection = 0
    if len(k.shape) == 2 and len(q.shape) == 3:  # contrib Attention: (input, weights)
        b, s_q, _ = q.shape
        projection = 2 * b * s_q * k.elems
        hidden = outs[0].shape[-1]
        s_kv = outs[1].shape[3] if len(outs) > 1 and len(outs[1].shape) == 5 else s_q
        hd = hidden // heads
    elif len(q.shape) == 4:  # (B, heads, S, head_dim)
        b, heads, s_q, hd = q.shape
        s_kv = k.shape[2]
    else:  # (B, S, hidden)
        b, s_q, hidden = q.shape
        s_kv = k.shape[1] if len(k.shape) == 3 else s_q
        hd = hidden // heads
    scores = b * heads * s_q * s_kv
    return NodeCost(projection + 2 * 2 * scores * hd + 5 * scores, {"in_channels": heads * hd})


def _group_query_attention(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """GroupQueryAttention: scores of every query head over the present
    sequence (past plus new tokens), as :func:`_attention`; the rotary
    embedding it may apply (3 per query and key element) is counted too."""
    out = outs[0]
    b, s_q, hidden = out.shape
    heads = int(attrs["num_heads"])  # KeyError if absent: not ruled
    hd = hidden // heads
    present = outs[1] if len(outs) > 1 else None
    s_kv = present.shape[2] if present is not None and len(present.shape) == 4 else s_q
    scores = b * heads * s_q * s_kv
    rotary = 3 * 2 * out.elems if attrs.get("do_rotary", 0) else 0
    return NodeCost(2 * 2 * scores * hd + 5 * scores + rotary, {"in_channels": heads * hd})


def _block_quantized_matmul(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """MatMulNBits / MatMulBnb4: ``A [.., K]`` times a block-quantized
    ``[K, N]`` weight (attributes K and N): the MatMul count (2 per MAC)
    plus the weight's dequantization, one per weight element per call."""
    k, n = int(attrs["K"]), int(attrs["N"])  # KeyError if absent: not ruled
    has_bias = len(ins) > 5 and ins[5] is not None
    flops = 2 * outs[0].elems * k + k * n + (outs[0].elems if has_bias else 0)
    return NodeCost(flops, {"has_bias": int(has_bias), "in_channels": k, "out_channels": n})


#: Position of the fc1, fc2 and fc3 expert weights among a MoE / QMoE node's inputs.
_MOE_WEIGHTS = {"MoE": (2, 4, 6), "QMoE": (2, 5, 8)}
#: FLOPs per element of the first expert layer's output (its activation).
MOE_ACTIVATION_FLOPS = 4
#: FLOPs per token and expert of the router's softmax and top-k.
MOE_ROUTING_FLOPS = 3


def _moe(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """onnxruntime's MoE / QMoE (onnxruntime-genai's GPT-OSS, Mixtral,
    Phi-MoE builds): each token through its ``k`` experts, the expert
    layers' MACs twice per weight element (a QMoE weight packs ``8 /
    expert_weight_bits`` elements a byte), the first layer's activation, and
    the router's softmax and top-k over the experts."""
    x, router = _t(ins[0]), _t(ins[1])
    experts = router.shape[-1]
    tokens = x.elems / x.shape[-1]
    unpack = 8 / int(attrs.get("expert_weight_bits", 4)) if op == "QMoE" else 1
    weights = [w for i in _MOE_WEIGHTS[op] if i < len(ins) and (w := ins[i]) is not None]
    per_expert = unpack * sum(w.elems for w in weights) / experts
    fc1_out = unpack * _t(ins[2]).elems / experts / x.shape[-1]
    k = int(attrs.get("k", 1))
    return NodeCost(tokens * k * (2 * per_expert + MOE_ACTIVATION_FLOPS * fc1_out)
                    + MOE_ROUTING_FLOPS * tokens * experts)


def _fused_matmul(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """FusedMatMul (MatMul with transposed operands and a scale): the MatMul count."""
    a = _t(ins[0])
    k = a.shape[-2] if attrs.get("transA", 0) and len(a.shape) >= 2 else a.shape[-1]
    n = outs[0].shape[-1] if outs[0].shape else 1
    return NodeCost(2 * outs[0].elems * k, {"in_channels": k, "out_channels": n})


def _norm(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    per = 5 + sum(1 for t in ins[1:3] if t is not None)
    if op == "BatchNormalization":
        per = 2
    return NodeCost(per * outs[0].elems, {"has_bias": int(len(ins) > 2 and ins[2] is not None)})


def _pool(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    kernel = tuple(attrs.get("kernel_shape", ()))
    hp = _spatial_attrs(attrs, kernel)
    return NodeCost(outs[0].elems * math.prod(kernel), hp)


def _softmax(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    return NodeCost(5 * outs[0].elems)


def _reduce(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    return NodeCost(_t(ins[0]).elems)


#: FLOPs per output element of an interpolation mode (Resize, GridSample).
INTERPOLATION_FLOPS = {"nearest": 0, "linear": 4, "bilinear": 4, "cubic": 16, "bicubic": 16}


def _resize(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """Resize / Upsample / GridSample: INTERPOLATION_FLOPS of the mode per
    output element (Resize's default mode is nearest, GridSample's linear)."""
    mode = attrs.get("mode", "linear" if op == "GridSample" else "nearest")
    if isinstance(mode, bytes):
        mode = mode.decode()
    return NodeCost(INTERPOLATION_FLOPS.get(mode, 4) * outs[0].elems)


#: FLOPs of an N-point complex FFT, per N log2 N (radix-2 count); a real
#: input's transform costs half.
FFT_FLOPS = 5


def _fourier(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """DFT and STFT: FFT_FLOPS N log2 N per N-point transform (half on a
    real signal, whose last dim is 1), plus STFT's window (N a frame).

    DFT's transforms run along ``axis`` (an attribute at opset 17, default
    1; an input at opset 20, read here as its default -2); STFT's output is
    [batch, frames, bins, 2] with N the window's length, else 2 (bins - 1)
    one-sided, bins two-sided."""
    x, y = _t(ins[0]), outs[0]
    real = 0.5 if x.shape[-1] == 1 else 1.0
    if op == "STFT":
        window = ins[2] if len(ins) > 2 else None
        batch, frames, bins = y.shape[0], y.shape[1], y.shape[2]
        n = window.elems if window is not None else (
            2 * (bins - 1) if attrs.get("onesided", 1) else bins)
        n = max(n, 1)
        return NodeCost(batch * frames * (real * FFT_FLOPS * n * math.log2(n) + n))
    rank = len(x.shape)
    axis = attrs.get("axis", 1 if len(ins) < 3 else -2)
    axis = axis + rank if axis < 0 else axis
    n = max(x.shape[axis], 1)
    transforms = x.elems / (n * x.shape[-1])
    return NodeCost(transforms * real * FFT_FLOPS * n * math.log2(n))


def _elementwise(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    per = ELEMENTWISE_FLOPS[op]
    n_in = sum(1 for t in ins if t is not None)
    if op in _VARIADIC:
        per = max(n_in - 1, 1)
    return NodeCost(per * outs[0].elems)


def _qlinear_conv(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """QLinearConv (x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B):
    the Conv count on (x, w, B), plus requantization (2 per output)."""
    base = _conv("Conv", [ins[0], ins[3], ins[8] if len(ins) > 8 else None], outs, attrs)
    return NodeCost(base.flops + 2 * outs[0].elems, base.hparams)


def _qlinear_matmul(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """QLinearMatMul (a, a_scale, a_zp, b, ...): the MatMul count plus
    requantization (2 per output)."""
    base = _matmul("MatMul", [ins[0], ins[3]], outs, attrs)
    return NodeCost(base.flops + 2 * outs[0].elems, base.hparams)


def _integer_matmul(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """MatMulInteger and its fused forms: the MatMul count (int8 MACs)."""
    return _matmul("MatMul", ins[:2], outs, attrs)


def _integer_conv(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    return _conv("Conv", ins[:2], outs, attrs)


def _dynamic_quantize(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """DynamicQuantizeLinear: min and max (2), scale, then round-and-clip
    of every element (3): 5 per input element."""
    return NodeCost(5 * _t(ins[0]).elems)


def _quantize(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """(De)QuantizeLinear: scale and shift (2 per element)."""
    return NodeCost(2 * outs[0].elems)


#: FLOPs of one intersection-over-union test of two boxes (4 min/max, 3
#: subtractions, 3 multiplications, a division and a comparison).
IOU_FLOPS = 12


def _nms(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """NonMaxSuppression (boxes [B, N, 4], scores [B, C, N]) -> [S, 3]:
    per batch and class, sort the N scores (N log2 N), then test each of the
    K kept boxes against the candidates after it (N K - K (K + 1) / 2 IoU
    tests), with K = S / (B C): the selected count, an upper bound when the
    data decides it (:mod:`perfseer_rt.graph.data_dependent`)."""
    scores = _t(ins[1]).shape
    if len(scores) != 3:
        raise ValueError("scores must be [batch, classes, boxes]")
    b, c, n = scores
    lists = b * c
    k = min(n, outs[0].shape[0] // lists) if lists and outs[0].shape else 0
    pairs = n * k - k * (k + 1) // 2
    return NodeCost(float(lists * (IOU_FLOPS * pairs + n * math.log2(max(n, 1)))))


#: FLOPs of one bilinear sample (four weights, four multiply-adds, the
#: accumulation into its bin).
BILINEAR_FLOPS = 10
#: Samples per RoiAlign bin when ``sampling_ratio`` is 0 (adaptive: set by
#: each region's size, known only at run time): 2 x 2 assumed.
ADAPTIVE_SAMPLES = 4


def _roi_align(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """RoiAlign: every output element (one bin of one region) averages or
    maxes ``sampling_ratio``^2 bilinear samples (ADAPTIVE_SAMPLES when the
    ratio is 0)."""
    ratio = attrs.get("sampling_ratio", 0)
    if type(ratio) is not int or not 0 <= ratio <= 1 << 16:
        raise ValueError("sampling_ratio out of range")
    samples = ratio * ratio if ratio else ADAPTIVE_SAMPLES
    return NodeCost(float(BILINEAR_FLOPS * samples * outs[0].elems))


def _recurrent(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """LSTM / GRU / RNN (X, W, R, B, sequence_lens, initial_h[, initial_c, P]):
    :func:`perfseer_rt.graph.recurrent.recurrent_flops`."""
    x, w, r = _t(ins[0]), _t(ins[1]), _t(ins[2])
    present = [t is not None for t in ins]
    peepholes = op == "LSTM" and len(ins) > 7 and present[7]
    bias = len(ins) > 3 and present[3]
    flops = recurrent_flops(op, x.shape, w.shape, r.shape[-1], attrs.get("layout", 0) == 1, bias,
                            peepholes)
    return NodeCost(flops, {"in_channels": w.shape[2], "out_channels": r.shape[-1],
                            "has_bias": int(bias)})


def _quantized_lstm(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """DynamicQuantizeLSTM (onnxruntime contrib; X, W, R, B, sequence_lens,
    initial_h, initial_c, P, then scales and zero points): an LSTM whose int8
    W ``[directions, I, 4H]`` and R ``[directions, H, 4H]`` are stored
    transposed; costed as :func:`_recurrent` costs LSTM."""
    x, w = _t(ins[0]), _t(ins[1])
    dirs, width, rows = w.shape
    bias = len(ins) > 3 and ins[3] is not None
    peepholes = len(ins) > 7 and ins[7] is not None
    flops = recurrent_flops("LSTM", x.shape, (dirs, rows, width), rows // 4, False, bias, peepholes)
    return NodeCost(flops, {"in_channels": width, "out_channels": rows // 4, "has_bias": int(bias)})


def _lrn(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """LRN: per element, the squares summed over ``size`` channels plus the
    scale, power and division (5)."""
    size = attrs.get("size")
    if type(size) is not int or not 1 <= size <= MAX_SPATIAL_ATTR:
        raise ValueError("LRN size out of range")
    return NodeCost(float((size + 5) * outs[0].elems))


def _deform_conv(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """DeformConv (X, W, offset, B, mask): the Conv count plus one bilinear
    sample of the input per kernel tap, input channel and output position."""
    base = _conv("Conv", [ins[0], ins[1], ins[3] if len(ins) > 3 else None], outs, attrs)
    w = _t(ins[1])
    positions = outs[0].elems // max(w.shape[0], 1)
    taps = _t(ins[0]).shape[1] * math.prod(w.shape[2:])
    return NodeCost(base.flops + BILINEAR_FLOPS * positions * taps, base.hparams)


#: FLOPs per output element of the QLinear element-wise ops: the float op's
#: (ELEMENTWISE_FLOPS, Softmax 5) plus requantization (2), as QLinearMatMul.
QLINEAR_ELEMENTWISE = {"QLinearAdd": 3, "QLinearMul": 3, "QLinearLeakyRelu": 4,
                       "QLinearSigmoid": 6, "QLinearSoftmax": 7, "QLinearConcat": 2}


def _qlinear_elementwise(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    return NodeCost(float(QLINEAR_ELEMENTWISE[op] * outs[0].elems))


def _qlinear_pool(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """QLinear(Global)AveragePool: the float pool plus requantization (2 per output)."""
    base = _pool(op, ins, outs, attrs) if "kernel_shape" in attrs else _reduce(op, ins, outs, attrs)
    return NodeCost(base.flops + 2 * outs[0].elems, base.hparams)


def _qgemm(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """QGemm (A, ., ., B, ., ., C): the Gemm count plus requantization (2 per output)."""
    base = _gemm("Gemm", [ins[0], ins[3], ins[6] if len(ins) > 6 else None], outs, attrs)
    return NodeCost(base.flops + 2 * outs[0].elems, base.hparams)


def _zero(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    return NodeCost(0.0)


def _generic(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> NodeCost:
    """The documented cost of an op without a rule: 1 FLOP per output element."""
    return NodeCost(float(sum(t.elems for t in outs)))


CostRule = Callable[[str, Ins, Outs, Attrs], NodeCost]

#: op type -> cost rule; the registry the extractor consults.
COST_RULES: dict[str, CostRule] = {
    "Conv": _conv, "ConvTranspose": _conv,
    "Gemm": _gemm, "MatMul": _matmul, "Einsum": _einsum,
    "Attention": _attention, "MultiHeadAttention": _attention,
    "BatchNormalization": _norm, **{op: _norm for op in _NORMS},
    "MaxPool": _pool, "AveragePool": _pool, "LpPool": _pool,
    "Softmax": _softmax, "LogSoftmax": _softmax,
    **{op: _reduce for op in _REDUCTIONS},
    "Resize": _resize, "Upsample": _resize,
    **{op: _elementwise for op in ELEMENTWISE_FLOPS},
    **{op: _zero for op in DATA_MOVEMENT},
    "QLinearConv": _qlinear_conv, "QLinearMatMul": _qlinear_matmul,
    "MatMulInteger": _integer_matmul, "DynamicQuantizeMatMul": _integer_matmul,
    "MatMulIntegerToFloat": _integer_matmul, "ConvInteger": _integer_conv,
    "DynamicQuantizeLinear": _dynamic_quantize,
    "QuantizeLinear": _quantize, "DequantizeLinear": _quantize,
    "NonMaxSuppression": _nms, "RoiAlign": _roi_align, "GridSample": _resize,
    "LSTM": _recurrent, "GRU": _recurrent, "RNN": _recurrent, "LRN": _lrn,
    "DeformConv": _deform_conv, "DFT": _fourier, "STFT": _fourier,
    **{op: _qlinear_elementwise for op in QLINEAR_ELEMENTWISE},
    "QLinearGlobalAveragePool": _qlinear_pool, "QLinearAveragePool": _qlinear_pool,
    "QGemm": _qgemm, "QAttention": _attention,
    # onnxruntime contrib ops (shapes: perfseer_rt.graph.contrib)
    "GroupQueryAttention": _group_query_attention,
    "MatMulNBits": _block_quantized_matmul, "MatMulBnb4": _block_quantized_matmul,
    "FusedMatMul": _fused_matmul, "GatherBlockQuantized": _quantize,
    "DynamicQuantizeLSTM": _quantized_lstm,
    "MoE": _moe, "QMoE": _moe,
}


def is_known(op: str) -> bool:
    """Whether ``op`` has a cost rule (``Reduce*`` ops all do)."""
    return op in COST_RULES or op.startswith("Reduce")


def node_cost(op: str, ins: Ins, outs: Outs, attrs: Attrs) -> tuple[NodeCost, bool]:
    """FLOPs and hyper-parameters of one node, and whether a rule applied.

    Args:
        op: ONNX op type.
        ins: one :class:`TensorInfo` per input position (``None`` for an
            absent optional input); parameter inputs included.
        outs: one :class:`TensorInfo` per output.
        attrs: the node's attributes as plain Python values.

    Returns ``(cost, True)`` when a rule applied, ``(generic cost, False)``
    for an unknown op or one whose inputs its rule cannot read (e.g. a
    weight of unknown shape); the caller reports the latter as unknown.
    """
    rule = COST_RULES.get(op)
    if rule is None:
        rule = _reduce if op.startswith("Reduce") else None
    if rule is None:
        return _generic(op, ins, outs, attrs), False
    try:
        cost, ruled = rule(op, ins, outs, attrs), True
    except (IndexError, KeyError, AttributeError, TypeError, ZeroDivisionError, ValueError):
        cost, ruled = _generic(op, ins, outs, attrs), False
    _check_cost(op, cost)
    return cost, ruled


def _check_cost(op: str, cost: NodeCost) -> None:
    """Every number a rule returns is finite and non-negative, or the node's
    attributes were nonsense: a GraphError, never a silent feature."""
    try:
        if 0 <= float(cost.flops) < math.inf:
            if not cost.hparams:
                return  # the common case, without building a list
            vals = list(map(float, cost.hparams.values()))
            if sum(vals) < math.inf and min(vals) >= 0:  # a NaN or inf makes the sum fail
                return
        bad = [k for k, v in (("flops", cost.flops), *cost.hparams.items())
               if not 0 <= float(v) < math.inf]
    except (OverflowError, TypeError, ValueError):
        bad = ["flops"]
    if bad:
        raise GraphError(f"a {op} node's attributes give a negative or non-finite "
                         f"{', '.join(bad)}")


def dtype_itemsize(elem_type: int) -> float:
    """Bytes per element of an ONNX TensorProto data type.

    Raises:
        GraphError: UNDEFINED, STRING or unknown types (see :mod:`dtypes`).
    """
    return dtypes.itemsize(elem_type)
