"""The one source of truth for the PerfGraph feature layout.

Training (``training/``) and the runtime (``perfseer_rt.predict``) both read
column names and their order from here; an exported predictor records
:data:`FEATURE_VERSION` and refuses graphs of another layout.

Units: ``flops`` are floating-point operations (FLOPs = 2 x MACs for
Conv/Gemm/MatMul, see :mod:`perfseer_rt.graph.ops`); ``mac`` is the memory
access cost in bytes (input + weight + output tensor bytes); ``weight`` is
the byte size of constant inputs (initializers) of a node; ``params`` is the
element count of those constants; ``ai`` (arithmetic intensity) is FLOP/byte.
Tensor sizes on edges are element counts.

Shape slots of edges (batch, channel, height, width) are filled from a
tensor of rank r as follows:

* r = 4 ``(N, C, H, W)``: as is (attention scores ``(B, heads, S, S)`` too).
* r = 3 ``(B, S, D)`` (transformer activations): batch = B, channel = D
  (hidden size), height = S (sequence length), width = 1.
* r = 2 ``(B, D)``: batch = B, channel = D, height = width = 1.
* r = 1 ``(D,)``: batch = 1, channel = D, height = width = 1.
* r = 0: all ones.
* r >= 5 ``(N, C, D1, ..., Dk)``: batch = N, channel = C, height = the
  product of D1..D(k-1), width = Dk.
"""

from __future__ import annotations

FEATURE_VERSION = "psrt-2"

#: Op-type vocabulary of the one-hot block; anything else goes to "other".
OP_VOCAB: tuple[str, ...] = (
    "Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum",
    "BatchNormalization", "LayerNormalization", "InstanceNormalization",
    "GroupNormalization",
    "Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "HardSigmoid",
    "HardSwish", "Clip", "Gelu", "Erf", "Softmax",
    "Add", "Sub", "Mul", "Div", "Pow", "Sqrt",
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
    "ReduceMean", "ReduceSum",
    "Concat", "Split", "Slice", "Gather", "Reshape", "Transpose",
    "Flatten", "Squeeze", "Unsqueeze", "Expand", "Pad", "Resize",
    "Where", "Cast", "Identity", "Dropout", "Attention",
)
OTHER_OP = "other"

#: Hyper-parameter columns of a node (0 where an op has no such parameter).
HPARAM_COLUMNS: tuple[str, ...] = (
    "kernel_h", "kernel_w", "stride_h", "stride_w", "pad_h", "pad_w",
    "dilation_h", "dilation_w", "groups", "has_bias",
    "in_channels", "out_channels", "in_elems", "out_elems",
    "num_inputs", "num_outputs",
)

#: Cost columns of a node, followed by the proportions of the model total.
COST_COLUMNS: tuple[str, ...] = (
    "flops", "mac", "weight", "params", "ai",
    "flops_ratio", "mac_ratio", "weight_ratio",
)

NODE_COLUMNS: tuple[str, ...] = (
    tuple(f"op_{op}" for op in OP_VOCAB) + (f"op_{OTHER_OP}",)
    + HPARAM_COLUMNS + COST_COLUMNS
)

EDGE_COLUMNS: tuple[str, ...] = (
    "size", "batch", "channel", "height", "width", "dtype_bytes",
)

#: The global columns of layout ``psrt-1``.
BASE_GLOBAL_COLUMNS: tuple[str, ...] = (
    "num_nodes", "num_edges", "density",
    "flops_total", "flops_mean", "flops_median", "flops_max",
    "mac_total", "mac_mean", "mac_median", "mac_max",
    "weight_total", "weight_mean", "weight_median", "weight_max",
    "params_total", "edge_size_mean", "ai_model", "batch_size",
)

#: Global columns added in ``psrt-2``, computed from the node and edge arrays
#: by :mod:`perfseer_rt.graph.structure` (definitions and units there): the
#: unique weight bytes by the kind of operator that reads them, the FLOPs of
#: grouped convolutions and matrix products, and the activation bytes alive
#: at once and in all.
STRUCTURE_COLUMNS: tuple[str, ...] = (
    "weight_conv1x1", "weight_conv_kxk", "weight_conv_grouped", "weight_matmul", "weight_other",
    "weight_conv_unaligned", "flops_conv_grouped", "flops_matmul", "act_live_peak", "act_total",
)

GLOBAL_COLUMNS: tuple[str, ...] = BASE_GLOBAL_COLUMNS + STRUCTURE_COLUMNS

#: Every layout a predictor may have been trained on -> its global columns.
#: Node and edge columns are the same in all; a predictor of an older layout
#: reads the first ``len(GLOBAL_COLUMNS_OF[version])`` globals.
GLOBAL_COLUMNS_OF: dict[str, tuple[str, ...]] = {"psrt-1": BASE_GLOBAL_COLUMNS,
                                                 FEATURE_VERSION: GLOBAL_COLUMNS}

#: Columns whose values span many orders of magnitude; predictors take
#: ``log1p`` of them before standardising (recorded in each manifest).
LOG_SCALED: frozenset[str] = frozenset(
    {"in_channels", "out_channels", "in_elems", "out_elems", "flops", "mac",
     "weight", "params", "ai", "size", "batch", "channel", "height", "width",
     "num_nodes", "num_edges", "edge_size_mean", "ai_model", "batch_size",
     "act_live_peak", "act_total"}
    | {c for c in GLOBAL_COLUMNS if c.split("_")[0] in ("flops", "mac", "weight", "params")}
)


def column_index(columns: tuple[str, ...]) -> dict[str, int]:
    """Map column name -> position for one of the column tuples above."""
    return {name: i for i, name in enumerate(columns)}
