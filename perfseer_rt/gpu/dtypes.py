"""The dtype of every tensor of a graph when PyTorch runs it at a precision
(:mod:`perfseer_rt.gpu.precision`), and the casts autocast inserts.

Under ``torch.autocast`` (``amp-fp16`` / ``amp-bf16``), by PyTorch's CUDA
autocast op lists:

* GEMM-like ops (Conv, ConvTranspose, MatMul, Gemm, Einsum, attention,
  recurrent layers) run in half precision: each fp32 data input is cast
  first (one cast kernel per input and op), each fp32 weight is cast once per
  step (a cast kernel reading 4 and writing 2 bytes per element); the output
  is half.
* fp32-list ops (softmax, log-softmax, layer/group norm, exp, log, pow,
  reciprocal, softplus, sums and products) produce fp32.
* every other op produces the widest float dtype of its inputs, counting a
  float constant of more than one element (a position embedding, a layer
  scale, a class token) as fp32 - PyTorch's type promotion; one-element
  constants are scalars and do not promote. BatchNorm keeps its input's
  dtype (cuDNN takes fp32 statistics with half data).

Without autocast every float tensor has the precision's element size (4 for
fp32/TF32, 2 for a half model). Integer and boolean tensors keep the size
the export gives them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfseer_rt.gpu.patterns import Adjacency
from perfseer_rt.gpu.precision import Precision
from perfseer_rt.graph.perfgraph import PerfGraph

GEMM_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum", "LSTM", "GRU", "RNN",
                      "Attention", "MultiHeadAttention"})
FP32_OPS = frozenset({"Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization",
                      "SkipLayerNormalization", "SimplifiedLayerNormalization", "Exp", "Log",
                      "Pow", "Reciprocal", "Softplus", "ReduceSum", "ReduceProd", "ReduceL2",
                      "ReduceLogSumExp", "CumSum"})
KEEP_INPUT_OPS = frozenset({"BatchNormalization", "InstanceNormalization"})


@dataclass(frozen=True)
class Dtypes:
    """Bytes per element per node, and the casts autocast adds.

    ``out_bytes[i]``: element size of node ``i``'s outputs; ``in_bytes[i]``:
    bytes of its data inputs (their elements at their producers' element
    sizes; graph inputs at the export's); ``weight_bytes[i]``: bytes of its
    constants as the kernel reads them; ``casts``: ``(node, elements,
    reason)`` of every cast kernel (input or weight casts before node).
    """

    out_bytes: np.ndarray
    in_bytes: np.ndarray
    weight_bytes: np.ndarray
    casts: list[tuple[int, float, str]]


def _export_out_bytes(graph: PerfGraph) -> np.ndarray:
    """Element size of each node's output as exported (from an edge it
    feeds; 4 where none)."""
    out = np.full(graph.num_nodes, 4.0)
    if graph.num_edges:
        out[graph.edge_index[0]] = graph.edge_column("dtype_bytes")
    return out


def infer(graph: PerfGraph, adj: Adjacency, prec: Precision) -> Dtypes:
    """The :class:`Dtypes` of ``graph`` at ``prec`` (module rules)."""
    n = graph.num_nodes
    ops = graph.node_ops
    col = graph.node_column
    exported = _export_out_bytes(graph)
    is_float = exported == 4.0  # fp32 as exported (int32 tensors are rare in these graphs)
    params, mac, weight = col("params"), col("mac"), col("weight")
    out_elems = col("out_elems")
    out_b = np.where(is_float, prec.act_bytes, exported)
    in_b = np.zeros(n)
    w_b = np.zeros(n)
    casts: list[tuple[int, float, str]] = []
    for i, op in enumerate(ops):
        preds = adj.pred[i]
        edge_in = sum(adj.edge_elems[(p, i)] for p in preds)
        # data inputs that are graph inputs: the node's data bytes less its edges'
        graph_in = max(float(mac[i]) - float(weight[i]) - float(out_elems[i]) * exported[i]
                       - sum(adj.edge_elems[(p, i)] * exported[p] for p in preds), 0.0)
        if not prec.autocast:  # a half model is fed half inputs
            in_b[i] = sum(adj.edge_elems[(p, i)] * out_b[p] for p in preds) + graph_in * prec.act_bytes / 4.0
            w_b[i] = float(params[i]) * prec.weight_bytes if weight[i] > 0 else 0.0
            continue
        in_dt = [out_b[p] for p in preds]
        if op in GEMM_OPS:
            for p in preds:
                if out_b[p] == 4.0 and exported[p] == 4.0:
                    casts.append((i, adj.edge_elems[(p, i)], "input"))
            if graph_in > 0:
                casts.append((i, graph_in / 4.0, "input"))
            in_b[i] = 2.0 * (edge_in + graph_in / 4.0)
            if weight[i] > 0:
                casts.append((i, float(params[i]), "weight"))
                w_b[i] = 2.0 * float(params[i])
            if is_float[i]:
                out_b[i] = 2.0
            continue
        in_b[i] = sum(adj.edge_elems[(p, i)] * out_b[p] for p in preds) + graph_in
        w_b[i] = 4.0 * float(params[i]) if weight[i] > 0 else 0.0
        if not is_float[i]:
            continue
        if op in FP32_OPS:
            out_b[i] = 4.0
        elif op in KEEP_INPUT_OPS:
            out_b[i] = in_dt[0] if in_dt else 4.0
        else:
            widest = max(in_dt) if in_dt else 4.0
            if params[i] > 1.0 or graph_in > 0:
                widest = 4.0  # a float constant (or a graph input) of more than one element
            out_b[i] = widest
    return Dtypes(out_b, in_b, w_b, casts)
