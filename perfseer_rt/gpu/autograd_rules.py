"""What PyTorch allocates and keeps for each ONNX operator (the rule table
of :mod:`perfseer_rt.gpu.mem_schedule`).

An ONNX graph names the operators PyTorch ran (the TorchScript exporter
maps ATen ops onto ONNX nodes about one to one). Per op, a :class:`Rule`
says what PyTorch eager does with memory:

* ``out``: ``"new"`` (a new tensor), ``"view"`` (shares its input's storage:
  reshapes, transposes, slices, splits; a Reshape/Flatten of a transposed
  view copies, as ``Tensor.reshape`` does), ``"inplace"`` (runs in place when
  the model could: its input feeds nothing else and the input's producer
  does not keep its own output; the ``nn.ReLU(inplace=True)`` convention of
  timm and torchvision CNNs), ``"inplace_add"`` (``x += shortcut`` of
  ResNet blocks: in place when the first input feeds only it and comes from a
  convolution or BatchNorm).
* ``saves``: what autograd keeps for the backward pass (``derivatives.yaml``):
  ``"in"`` its data inputs, ``"out"`` its output, ``"both"``, ``"none"``,
  ``"cross"`` each input whose partner needs a gradient (a product
  ``y = a b``: ``da`` needs ``b``, ``db`` needs ``a``; a weight counts as
  needing one, so Conv, Gemm and a MatMul with a weight keep their input,
  and a product with a constant keeps nothing), ``"in0"`` the first input.
* ``extra``: small tensors kept besides (bytes per output element, or per
  row for LayerNorm): MaxPool's int64 indices, Dropout's bool mask,
  LayerNorm's fp32 mean and rstd, BatchNorm's per-channel stats.
* ``grad``: what the backward allocates for each input that needs a
  gradient: ``"new"`` one input-sized tensor, ``"alias"`` none (the output's
  gradient is passed on: Add, views), ``"scatter"`` an input-sized zero
  tensor the output's gradient is copied into (Slice, Split, Gather-select).
* ``amp``: the autocast class on CUDA (``aten/src/ATen/autocast_mode.cpp``):
  ``"lowp"`` (runs in fp16/bf16: conv, matmul, linear, attention),
  ``"fp32"`` (softmax, log_softmax, layer_norm, group_norm, pow, exp, log,
  sum, ...: outputs fp32), ``"pass"`` (the input's dtype; binary ops
  promote to the wider input).

Fused patterns (one PyTorch op exported as several nodes) are in
:data:`FUSED`: erf-GELU (5 nodes), SiLU (``x * sigmoid(x)``), Linear with
its bias (MatMul + Add), and scaled-dot-product attention (MatMul, scale,
mask, Softmax, MatMul) where PyTorch runs a fused kernel that keeps only
q, k, v, the output and the fp32 log-sum-exp rows.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    out: str = "new"
    saves: str = "in"
    extra: str = ""
    grad: str = "new"
    amp: str = "pass"


_VIEW = Rule(out="view", saves="none", grad="alias")
_ELEM_NONE = Rule(saves="none")          #: unary ops whose backward needs no tensor
_ELEM_OUT = Rule(saves="out")            #: y = f(x) with f' from y (exp, sigmoid, tanh)
_ELEM_IN = Rule(saves="in")              #: f' from x (gelu, erf, sqrt's input, ...)

RULES: dict[str, Rule] = {
    # matrix products and convolutions (lowp under autocast); Conv/Gemm/MatMul
    # with a weight save the input (the weight is a parameter anyway)
    "Conv": Rule(saves="cross", amp="lowp"),
    "ConvTranspose": Rule(saves="cross", amp="lowp"),
    "Gemm": Rule(saves="cross", amp="lowp"),
    "MatMul": Rule(saves="cross", amp="lowp"),
    "Einsum": Rule(saves="cross", amp="lowp"),
    "PRelu": Rule(saves="in", amp="lowp"),
    "LSTM": Rule(saves="both", amp="lowp"),
    "GRU": Rule(saves="both", amp="lowp"),
    "RNN": Rule(saves="both", amp="lowp"),
    # normalizations
    "BatchNormalization": Rule(saves="in", extra="bn_stats"),
    "LayerNormalization": Rule(saves="in", extra="ln_stats", amp="fp32"),
    "GroupNormalization": Rule(saves="in", extra="ln_stats", amp="fp32"),
    "InstanceNormalization": Rule(saves="in", extra="ln_stats", amp="fp32"),
    "SimplifiedLayerNormalization": Rule(saves="in", extra="ln_stats", amp="fp32"),
    # activations
    "Relu": Rule(out="inplace", saves="out"),
    "LeakyRelu": Rule(out="inplace", saves="out"),
    "Sigmoid": _ELEM_OUT, "Tanh": _ELEM_OUT,
    "Exp": Rule(saves="out", amp="fp32"),
    "Gelu": _ELEM_IN, "Erf": _ELEM_IN, "HardSwish": _ELEM_IN, "HardSigmoid": _ELEM_IN,
    "Clip": _ELEM_IN, "Elu": _ELEM_IN, "Selu": _ELEM_IN, "Celu": _ELEM_IN, "Mish": _ELEM_IN,
    "Softplus": Rule(saves="in", amp="fp32"), "Softsign": _ELEM_IN,
    "Sqrt": _ELEM_OUT, "Abs": _ELEM_IN, "Neg": _ELEM_NONE, "Sin": _ELEM_IN, "Cos": _ELEM_IN,
    "Log": Rule(saves="in", amp="fp32"), "Reciprocal": Rule(saves="out", amp="fp32"),
    "Pow": Rule(saves="in", amp="fp32"),
    "Softmax": Rule(saves="out", amp="fp32"),
    "LogSoftmax": Rule(saves="out", amp="fp32"),
    # binary element-wise: an Add/Sub keeps nothing; Mul/Div keep their inputs
    "Add": Rule(out="inplace_add", saves="none", grad="alias"),
    "Sub": Rule(saves="none"),
    "Mul": Rule(saves="cross"), "Div": Rule(saves="cross"),
    "Max": Rule(saves="in"), "Min": Rule(saves="in"), "Where": Rule(saves="in0"),
    # pooling and reductions
    "MaxPool": Rule(saves="in", extra="indices"),
    "AveragePool": Rule(saves="in"), "GlobalAveragePool": Rule(saves="in"),
    "GlobalMaxPool": Rule(saves="in", extra="indices"),
    "ReduceMean": Rule(saves="none", amp="pass"), "ReduceSum": Rule(saves="none", amp="fp32"),
    "ReduceMax": Rule(saves="both"), "ReduceMin": Rule(saves="both"),
    "CumSum": Rule(saves="none", amp="fp32"),
    # data movement: views in PyTorch (reshape, permute, narrow, split, select)
    "Reshape": _VIEW, "Flatten": _VIEW, "Squeeze": _VIEW, "Unsqueeze": _VIEW,
    "Identity": _VIEW, "Transpose": _VIEW, "Expand": Rule(out="view", saves="none", grad="new"),
    "Slice": Rule(out="view", saves="none", grad="scatter"),
    "Split": Rule(out="view", saves="none", grad="scatter"),
    "Concat": Rule(saves="none", grad="alias", amp="pass"),
    "Pad": Rule(saves="none"), "Tile": Rule(saves="none"),
    "Resize": Rule(saves="none"), "Upsample": Rule(saves="none"),
    "Cast": Rule(saves="none"),
    "Dropout": Rule(saves="none", extra="mask"),
    "Gather": Rule(out="view", saves="none", grad="scatter"),   # select; an embedding is new
}

#: Ops whose outputs carry no gradient (masks, indices, shapes).
NO_GRAD_OPS = frozenset({
    "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Not", "And", "Or", "Xor",
    "Shape", "Size", "ArgMax", "ArgMin", "NonZero", "ConstantOfShape", "Range", "IsNaN",
    "IsInf", "Sign", "Floor", "Ceil", "Round", "OneHot", "TopK", "EyeLike", "Trilu",
})

#: The fused patterns (see the module doc) and what each keeps.
FUSED: dict[str, Rule] = {
    "Gelu": Rule(saves="in"),
    "SiLU": Rule(saves="in"),
    "Linear": Rule(saves="cross", amp="lowp"),
    "Attention": Rule(saves="both", extra="lse", amp="lowp"),  # q, k, v, out, lse
}

#: The rule an op without an entry gets (counted and reported).
DEFAULT = Rule(saves="in")


def rule(op: str) -> tuple[Rule, bool]:
    """The rule of ``op`` and whether it is in the table."""
    r = RULES.get(op)
    return (r, True) if r is not None else (DEFAULT, False)
