"""PerfGraph nodes -> GPU kernels of the prior's families.

=============================================  ===============================
ONNX node                                      kernel
=============================================  ===============================
MatMul / Gemm with a constant operand          ``linear`` (rows = all leading dims)
MatMul with two data inputs                    ``bmm`` (batch = leading dims)
Conv, groups = 1                               ``conv`` (implicit GEMM view)
LayerNormalization (+ Skip/Simplified)         ``ln``
Softmax / LogSoftmax                           ``softmax``
element-wise ops (``ops.ELEMENTWISE_FLOPS``)   ``elem``
views (Reshape, Flatten, Squeeze, Unsqueeze,   no kernel, 0 ms
Identity, Dropout)
erf-GELU as exported before opset 20           one ``elem`` kernel (transcendental) for the
(Div or Mul, Erf, Add, Mul, Mul)               five nodes, as PyTorch's gelu and onnxruntime's
                                               Gelu fusion run it (:func:`erf_gelu_groups`)
LSTM / GRU / RNN                               per direction one ``linear`` (input projection),
                                               then per step and direction a ``linear``
                                               (recurrent GEMM) and an ``elem`` (the cell)
everything else (pooling, BatchNorm, grouped   ``memory``: bytes over the
/ depthwise Conv, Transpose, Concat, ...)      achieved element-wise bandwidth
=============================================  ===============================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfseer_rt.graph.ops import ELEMENTWISE_FLOPS
from perfseer_rt.graph.perfgraph import PerfGraph
from perfseer_rt.graph.recurrent import CELL_FLOPS, GATES, recurrent_batch, recurrent_steps

#: Ops that onnxruntime runs as views of their input: no kernel.
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})
LN_OPS = frozenset({"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                    "SkipSimplifiedLayerNormalization"})
SOFTMAX_OPS = frozenset({"Softmax", "LogSoftmax"})
#: Recurrent layers (:func:`_recurrent_kernels`).
RECURRENT_OPS = frozenset({"LSTM", "GRU", "RNN"})
#: Element-wise ops with a transcendental per element (NeuSight's gelu/tanh/pow rows).
TRANSCENDENTAL = frozenset({"Pow", "Exp", "Log", "Erf", "Sqrt", "Sigmoid", "Tanh", "Gelu",
                            "FastGelu", "BiasGelu", "QuickGelu", "Mish", "Softplus", "Elu",
                            "Selu", "Celu", "HardSwish", "Sin", "Cos"})
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where",
                    "Equal", "Greater", "Less", "And", "Or", "PRelu"})


@dataclass
class Kernels:
    """The kernels of one graph, grouped by family (plus ``memory`` and views).

    ``shapes[family]`` holds the family's shape arrays (as
    :mod:`perfseer_rt.gpu.features` expects); ``nodes[family]`` the PerfGraph
    node index of each kernel.
    """

    shapes: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    nodes: dict[str, np.ndarray] = field(default_factory=dict)
    views: list[int] = field(default_factory=list)
    #: nodes priced inside another node's kernel (a fused pattern's other nodes)
    fused: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        """Kernel launches (views excluded)."""
        return int(sum(len(v) for v in self.nodes.values()))


def _out_shapes(graph: PerfGraph) -> dict[int, tuple[int, ...]]:
    """Full output shape of every node that feeds another node."""
    out: dict[int, tuple[int, ...]] = {}
    if graph.edge_shapes:
        for j, shape in enumerate(graph.edge_shapes):
            out.setdefault(int(graph.edge_index[0, j]), tuple(shape))
    return out


def erf_gelu_groups(graph: PerfGraph) -> dict[int, list[int]]:
    """Erf node -> the five nodes of an erf-GELU it anchors:
    ``s = Div(x, c)`` (or ``Mul``), ``Erf(s)``, ``Add(erf, 1)``,
    ``Mul(x, add)``, ``Mul(., 0.5)`` (either Mul order), each intermediate
    read by the next node only, so one kernel can compute ``x -> y``."""
    ops = graph.node_ops
    if "Erf" not in ops or not graph.num_edges:
        return {}
    src, dst = graph.edge_index
    succ: dict[int, list[int]] = {}
    pred: dict[int, list[int]] = {}
    for a, b in zip(src.tolist(), dst.tolist()):
        succ.setdefault(a, []).append(b)
        pred.setdefault(b, []).append(a)

    def only_next(i: int, op: str) -> int | None:
        nxt = succ.get(i, [])
        return nxt[0] if len(nxt) == 1 and ops[nxt[0]] == op else None

    groups = {}
    for e, op in enumerate(ops):
        if op != "Erf" or len(pred.get(e, [])) != 1:
            continue
        scale = pred[e][0]
        add = only_next(e, "Add")
        mul1 = None if add is None else only_next(add, "Mul")
        mul2 = None if mul1 is None else only_next(mul1, "Mul")
        if add is None or mul1 is None or mul2 is None:
            continue
        x = set(pred.get(scale, []))  # x must feed the scale and one of the Muls
        if ops[scale] in ("Div", "Mul") and succ.get(scale) == [e] and x & set(pred[mul1] + pred[mul2]):
            groups[e] = [scale, e, add, mul1, mul2]
    return groups


def _recurrent_steps(graph: PerfGraph, i: int, out_shape: tuple[int, ...] | None
                     ) -> tuple[int, int, int] | None:
    """(directions, sequence length, batch) of recurrent node ``i``: the
    batch from one of its outputs' shapes where another node reads one, else
    the graph's batch."""
    col = graph.node_column
    op, width, hidden = graph.node_ops[i], int(col("in_channels")[i]), int(col("out_channels")[i])
    found = recurrent_steps(op, float(col("flops")[i]), float(col("in_elems")[i]), width, hidden,
                            bool(col("has_bias")[i]))
    if found is None:
        return None
    dirs, rows = found
    batch = recurrent_batch(out_shape, dirs, hidden) or int(graph.globals["batch_size"])
    if batch < 1 or rows % batch:
        return None
    return dirs, rows // batch, batch


def _recurrent_kernels(op: str, steps: tuple[int, int, int], width: int, hidden: int,
                       itemsize: float) -> list[tuple[str, dict[str, float]]]:
    """The kernels of an LSTM/GRU/RNN node: per direction one input
    projection (``seq x batch`` rows, ``G H`` wide, depth ``width``), then
    per step and direction a recurrent GEMM (``batch`` rows, depth
    ``hidden``) and a cell kernel (``CELL_FLOPS`` per hidden unit)."""
    dirs, seq, batch = steps
    wide = GATES[op] * hidden

    def gemm(m: int, k: int) -> dict[str, float]:
        return {"batch": 1.0, "m": float(m), "n": float(wide), "k": float(k),
                "flops": 2.0 * m * wide * k, "bytes": itemsize * (m * k + k * wide + m * wide)}

    cell = {"rows": float(batch), "cols": float(hidden), "flops": float(CELL_FLOPS[op] * batch * hidden),
            "bytes": itemsize * batch * (wide + 3 * hidden), "binary": 1.0, "transcendental": 1.0}
    out = [("linear", gemm(seq * batch, width)) for _ in range(dirs)]
    for _ in range(seq * dirs):
        out += [("linear", gemm(batch, hidden)), ("elem", dict(cell))]
    return out


def map_graph(graph: PerfGraph, itemsize_scale: float = 1.0) -> Kernels:
    """Map every node of ``graph`` to a kernel (see the module table).

    ``itemsize_scale`` multiplies every byte count (0.5: the fp16 assumption
    applied to an fp32 model).
    """
    col = graph.node_column
    flops, mac = col("flops"), col("mac") * itemsize_scale
    weight, cin, cout = col("weight"), col("in_channels"), col("out_channels")
    out_elems, n_in = col("out_elems"), col("num_inputs")
    kh, kw, groups = col("kernel_h"), col("kernel_w"), col("groups")
    shapes = _out_shapes(graph)
    rows: dict[str, list[dict[str, Any]]] = {}
    idx: dict[str, list[int]] = {}
    k = Kernels()
    odd_conv = set()

    def add(family: str, i: int, **shape: float) -> None:
        rows.setdefault(family, []).append(shape)
        idx.setdefault(family, []).append(i)

    gelu = erf_gelu_groups(graph)
    inside = {j for group in gelu.values() for j in group if j not in gelu}
    for i, op in enumerate(graph.node_ops):
        f, b = float(flops[i]), float(mac[i])
        shape = shapes.get(i)
        if i in inside:
            k.fused.append(i)
        elif i in gelu:  # reads x, writes y: the Erf node's bytes; the five nodes' FLOPs
            last = float(shape[-1]) if shape else float(max(out_elems[i], 1))
            add("elem", i, rows=max(out_elems[i] / last, 1.0), cols=last,
                flops=float(sum(flops[j] for j in gelu[i])), bytes=b, binary=0.0, transcendental=1.0)
        elif op in VIEW_OPS:
            k.views.append(i)
        elif op in ("MatMul", "Gemm") and cout[i] > 0 and cin[i] > 0 and f > 0:
            n, kk = float(cout[i]), float(cin[i])
            if weight[i] > 0 or op == "Gemm":
                add("linear", i, batch=1.0, m=max(out_elems[i] / n, 1.0), n=n, k=kk, flops=f, bytes=b)
            else:
                bat = float(np.prod(shape[:-2])) if shape and len(shape) > 2 else 1.0
                m = max(out_elems[i] / n / bat, 1.0)
                add("bmm", i, batch=bat, m=m, n=n, k=kk, flops=f, bytes=b)
        elif op == "Conv" and groups[i] <= 1 and cout[i] > 0 and f > 0:
            kk = float(cin[i] * max(kh[i], 1) * max(kw[i], 1))
            if (kh[i], kw[i], col("stride_h")[i]) != (3, 3, 1):
                odd_conv.add(f"{int(kh[i])}x{int(kw[i])}/s{int(col('stride_h')[i])}")
            add("conv", i, batch=1.0, m=max(out_elems[i] / cout[i], 1.0), n=float(cout[i]),
                k=kk, flops=f, bytes=b)
        elif op in LN_OPS or op in SOFTMAX_OPS:
            last = float(shape[-1]) if shape else float(max(cin[i], 1))
            add("ln" if op in LN_OPS else "softmax", i, rows=max(out_elems[i] / last, 1.0),
                cols=last, flops=f, bytes=b, binary=0.0, transcendental=0.0)
        elif op in ELEMENTWISE_FLOPS:
            last = float(shape[-1]) if shape else float(max(out_elems[i], 1))
            add("elem", i, rows=max(out_elems[i] / last, 1.0), cols=last, flops=f, bytes=b,
                binary=float(op in BINARY and n_in[i] >= 2),
                transcendental=float(op in TRANSCENDENTAL))
        elif op in RECURRENT_OPS and (steps := _recurrent_steps(graph, i, shape)) is not None:
            for family, kernel in _recurrent_kernels(op, steps, int(cin[i]), int(cout[i]),
                                                     4.0 * itemsize_scale):
                add(family, i, **kernel)
        else:
            add("memory", i, flops=f, bytes=b)
    for fam, lst in rows.items():
        k.shapes[fam] = {key: np.array([r[key] for r in lst], np.float64) for key in lst[0]}
        k.nodes[fam] = np.array(idx[fam], np.int64)
    if gelu:
        k.notes.append(f"{len(gelu)} erf-GELU pattern(s) (Div, Erf, Add, Mul, Mul) priced as one fused "
                       "kernel each, as PyTorch and onnxruntime's CUDA EP run them")
    recurrent = sorted({op for op in graph.node_ops if op in RECURRENT_OPS})
    if recurrent:
        k.notes.append(", ".join(recurrent) + " priced as cuDNN runs them, one input-projection "
                       "GEMM per direction, then per step and direction a recurrent GEMM and a "
                       "cell kernel (sequential: launch-bound at small batch); no recurrent "
                       "layer is among the prior's measured kernels")
    if odd_conv:
        k.notes.append("conv kernels outside NeuSight's measured 3x3 stride-1 set ("
                       + ", ".join(sorted(odd_conv)) + "): extrapolated in the implicit-GEMM view")
    return k
