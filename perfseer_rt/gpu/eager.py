"""The forward kernels PyTorch eager launches for an exported graph, at a
precision (runtime ``pytorch-eager``).

Each PerfGraph node becomes the kernels PyTorch runs for the module op it
was exported from (:mod:`perfseer_rt.gpu.patterns` finds the patterns):

=============================================  ====================================================
nodes                                          kernels (class)
=============================================  ====================================================
attention pattern (``sdpa=True``)              one fused SDPA kernel, priced as its two GEMM halves
                                               reading q, k, v (and a mask) and writing the output
                                               once (``attention``)
erf-GELU / SiLU / Mish node groups             one element-wise kernel (``elem``)
``MatMul(x, W) + b``                           one GEMM with its bias (``linear``)
MatMul/Gemm with a weight                      ``linear``; without: ``bmm``
Conv, groups = 1                               ``conv``; groups > 1: ``conv_grouped``
Conv whose BatchNorm the export folded         ``conv`` then a BatchNorm kernel (``norm_bn``)
BatchNormalization                             ``norm_bn``
LayerNorm / Softmax                            ``ln`` / ``softmax``
pooling; reductions                            ``pool``; ``reduce``
element-wise ops                               ``elem``
views (reshape, squeeze, split, slice, most    none (a host op only)
transposes)
other data movement (Concat, Pad, Gather,      ``copy`` (a Cast node: ``cast``)
Transpose that must copy, Resize...)
autocast casts (:mod:`perfseer_rt.gpu.dtypes`) ``cast``
=============================================  ====================================================

Peaks (``peak`` column): GEMM-like kernels run on the precision's math
(:func:`gemm_peak`); everything else is memory-bound (``none``).
"""

from __future__ import annotations

import numpy as np

from perfseer_rt.gpu import dtypes as D
from perfseer_rt.gpu import patterns as P
from perfseer_rt.gpu.kernel_table import Builder, KernelTable
from perfseer_rt.gpu.kernels import (
    BINARY,
    LN_OPS,
    RECURRENT_OPS,
    SOFTMAX_OPS,
    TRANSCENDENTAL,
    out_shapes,
    recurrent_kernels,
    recurrent_shape,
)
from perfseer_rt.gpu.precision import Precision
from perfseer_rt.graph.ops import ELEMENTWISE_FLOPS
from perfseer_rt.graph.perfgraph import PerfGraph

RUNTIME = "pytorch-eager"
POOL_OPS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
                      "GlobalLpPool", "MaxUnpool"})
REDUCE_OPS = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                        "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax",
                        "ArgMin", "CumSum"})
CONV_OPS = frozenset({"Conv", "ConvTranspose"})


def gemm_peak(prec: Precision, conv: bool) -> str:
    """The math a GEMM-like kernel runs on: the half dtype, TF32 where the
    precision allows it for this op class, else fp32."""
    if prec.half:
        return prec.dtype
    return "tf32" if (prec.tf32_conv if conv else prec.tf32_matmul) else "fp32"


def forward(graph: PerfGraph, prec: Precision, *, sdpa: bool = True, fold_bn: bool = True,
            phase: str = "forward") -> KernelTable:
    """The forward kernels of ``graph`` at ``prec`` (module table).

    ``sdpa``: attention runs as one fused kernel (PyTorch >= 2.0 with
    ``scaled_dot_product_attention``, as timm and transformers call it);
    ``fold_bn``: restore the BatchNorm kernels an eval-mode export folded.
    """
    adj = P.Adjacency.of(graph)
    dt = D.infer(graph, adj, prec)
    col = graph.node_column
    ops = graph.node_ops
    flops, out_elems = col("flops"), col("out_elems")
    cin, cout, groups = col("in_channels"), col("out_channels"), col("groups")
    kh, kw, n_in = col("kernel_h"), col("kernel_w"), col("num_inputs")
    shapes = out_shapes(graph)
    attn = P.attention_groups(graph, adj) if sdpa else []
    acts = P.activation_groups(graph, adj)
    bias_of = P.linear_bias(graph, adj)
    folded = P.folded_batchnorm(graph, adj) if fold_bn else set()
    pads = P.folded_pads(graph)
    views = P.view_nodes(graph, adj)
    view_ops = P.view_host_ops(graph, adj, views)
    anchor = {a.softmax: a for a in attn}
    inside = {j for a in attn for j in a.nodes if j != a.softmax}
    for e, (members, _) in acts.items():
        inside |= {j for j in members if j != e}
    inside |= set(bias_of.values())
    casts: dict[int, list[tuple[float, str]]] = {}
    for i, elems, why in dt.casts:
        casts.setdefault(i, []).append((elems, why))
    b = Builder(phase)
    host = 0.0  # host ops (views) waiting for the next kernel
    act = prec.act_bytes

    def nbytes(i: int) -> float:
        return float(dt.in_bytes[i] + dt.weight_bytes[i] + out_elems[i] * dt.out_bytes[i])

    def row_view(i: int) -> tuple[float, float]:
        shape = shapes.get(i)
        last = float(shape[-1]) if shape else float(max(out_elems[i], 1))
        return max(float(out_elems[i]) / max(last, 1.0), 1.0), max(last, 1.0)

    for i, op in enumerate(ops):
        if i in inside:  # one framework op with its group's anchor
            continue
        if i in views and i not in anchor and i not in acts:
            host += view_ops.get(i, 1.0)
            continue
        for elems, _why in casts.get(i, []):
            b.add("cast", i, elems, 6.0 * elems, rows=1.0, cols=max(elems, 1.0), host_ops=1.0)
        h = 1.0 + host
        host = 0.0
        if i in anchor:
            a = anchor[i]
            qkv_o = a.heads_batch * a.head_dim * (2 * a.seq_q + 2 * a.seq_k)
            total = qkv_o * act + a.mask_elems * float(dt.out_bytes[a.qk])
            fl = float(sum(flops[j] for j in a.nodes))
            peak = gemm_peak(prec, conv=False)
            b.add("attention", i, fl / 2, total / 2, peak, launches=0.5, host_ops=h,
                  batch=a.heads_batch, m=a.seq_q, n=a.seq_k, k=a.head_dim)
            b.add("attention", i, fl / 2, total / 2, peak, launches=0.5, host_ops=0.0,
                  batch=a.heads_batch, m=a.seq_q, n=a.head_dim, k=a.seq_k)
        elif i in acts:
            members, _ = acts[i]
            rows, cols = row_view(members[-1])
            first = members[0]
            x_bytes = float(dt.in_bytes[first])
            out_b = float(out_elems[members[-1]] * dt.out_bytes[members[-1]])
            b.add("elem", i, float(sum(flops[j] for j in members)), x_bytes + out_b,
                  rows=rows, cols=cols, binary=0.0, transcendental=1.0, host_ops=h)
        elif op in ("MatMul", "Gemm") and cout[i] > 0 and cin[i] > 0 and flops[i] > 0:
            n, kk = float(cout[i]), float(cin[i])
            peak = gemm_peak(prec, conv=False)
            extra_f = extra_b = 0.0
            if i in bias_of:
                a_ = bias_of[i]
                extra_f = float(flops[a_])
                extra_b = float(dt.weight_bytes[a_]) * (0.5 if prec.autocast else 1.0)
            if col("weight")[i] > 0 or op == "Gemm":
                b.add("linear", i, float(flops[i]) + extra_f, nbytes(i) + extra_b, peak, host_ops=h,
                      batch=1.0, m=max(float(out_elems[i]) / n, 1.0), n=n, k=kk)
            else:
                shape = shapes.get(i)
                bat = float(np.prod(shape[:-2])) if shape and len(shape) > 2 else 1.0
                b.add("bmm", i, float(flops[i]), nbytes(i), peak, host_ops=h,
                      batch=bat, m=max(float(out_elems[i]) / n / bat, 1.0), n=n, k=kk)
        elif op in CONV_OPS and flops[i] > 0 and cout[i] > 0:
            if i in pads:  # the F.pad eager runs first: reads the input, writes it padded
                b.add("copy", i, 0.0, 2.0 * float(dt.in_bytes[i]), host_ops=h)
                h = 1.0
            kk = float(cin[i] / max(groups[i], 1.0) * max(kh[i], 1) * max(kw[i], 1))
            m = max(float(out_elems[i]) / float(cout[i]), 1.0)
            if groups[i] <= 1:
                b.add("conv", i, float(flops[i]), nbytes(i), gemm_peak(prec, conv=True), host_ops=h,
                      batch=1.0, m=m, n=float(cout[i]), k=kk)
            else:
                b.add("conv_grouped", i, float(flops[i]), nbytes(i), host_ops=h,
                      batch=float(groups[i]), m=m, n=float(cout[i]) / float(groups[i]), k=kk)
            if i in folded:
                ob = float(out_elems[i] * dt.out_bytes[i])
                b.add("norm_bn", i, 2.0 * float(out_elems[i]), 2.0 * ob, host_ops=1.0,
                      rows=m, cols=float(cout[i]))
        elif op == "BatchNormalization":
            rows, cols = row_view(i)
            b.add("norm_bn", i, float(flops[i]), nbytes(i), host_ops=h, rows=rows, cols=cols)
        elif op in LN_OPS or op in SOFTMAX_OPS:
            rows, cols = row_view(i)
            b.add("ln" if op in LN_OPS else "softmax", i, float(flops[i]), nbytes(i), host_ops=h,
                  rows=rows, cols=cols)
        elif op in POOL_OPS:
            b.add("pool", i, float(flops[i]), nbytes(i), host_ops=h)
        elif op in REDUCE_OPS:
            b.add("reduce", i, float(flops[i]), nbytes(i), host_ops=h)
        elif op in ELEMENTWISE_FLOPS:
            rows, cols = row_view(i)
            b.add("elem", i, float(flops[i]), nbytes(i), host_ops=h, rows=rows, cols=cols,
                  binary=float(op in BINARY and n_in[i] >= 2),
                  transcendental=float(op in TRANSCENDENTAL))
        elif op in RECURRENT_OPS and (steps := recurrent_shape(graph, i, shapes.get(i))) is not None:
            for j, (family, kernel) in enumerate(recurrent_kernels(op, steps, int(cin[i]), int(cout[i]),
                                                                    act)):
                cls = "linear" if family == "linear" else "elem"
                peak = gemm_peak(prec, conv=False) if cls == "linear" else "none"
                b.add(cls, i, kernel["flops"], kernel["bytes"], peak, host_ops=h if j == 0 else 1.0,
                      **{k: v for k, v in kernel.items() if k not in ("flops", "bytes")})
        elif op == "Cast":
            b.add("cast", i, 0.0, nbytes(i), host_ops=h, rows=1.0, cols=float(max(out_elems[i], 1)))
        else:
            b.add("copy", i, float(flops[i]), nbytes(i), host_ops=h)
    if host and b.rows:  # views after the last kernel: dispatched all the same
        b.rows[-1]["host_ops"] += host
    notes = []
    if attn:
        notes.append(f"{len(attn)} attention pattern(s) priced as one fused SDPA kernel each "
                     "(PyTorch >= 2.0 scaled_dot_product_attention)")
    if folded:
        why = ("whose BatchNorm the exporter folded" if "folded_batchnorm" in graph.info
               else "with a bias and no normalization after them")
        notes.append(f"{len(folded)} Conv(s) {why} priced with the BatchNorm kernel PyTorch eager runs "
                     "after them (an eval-mode export folds it into the Conv)")
    if pads:
        notes.append(f"{len(pads)} F.pad kernel(s) PyTorch eager runs before a Conv, restored where the "
                     "dynamo exporter folded the Pad into the Conv")
    n_casts = sum(1 for c in b.rows if c["cls"] == "cast" and ops[int(c["node"])] != "Cast")
    if n_casts:
        notes.append(f"{n_casts} autocast cast kernel(s) (fp32 inputs and weights of half-precision ops)")
    return b.table(notes)
