"""Node rules shared by the GPU kernel model (:mod:`perfseer_rt.gpu.eager`):
op sets, the erf-GELU pattern (five nodes PyTorch runs as one kernel), each
node's output shape, and the kernels of recurrent layers (per direction one
input-projection GEMM, then per step and direction a recurrent GEMM and a
cell kernel, as cuDNN runs them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from perfseer_rt.graph.perfgraph import PerfGraph
from perfseer_rt.graph.recurrent import CELL_FLOPS, GATES, recurrent_batch, recurrent_steps

LN_OPS = frozenset({"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                    "SkipSimplifiedLayerNormalization"})
SOFTMAX_OPS = frozenset({"Softmax", "LogSoftmax"})
#: Recurrent layers (:func:`recurrent_kernels`).
RECURRENT_OPS = frozenset({"LSTM", "GRU", "RNN"})
#: Element-wise ops with a transcendental per element (NeuSight's gelu/tanh/pow rows).
TRANSCENDENTAL = frozenset({"Pow", "Exp", "Log", "Erf", "Sqrt", "Sigmoid", "Tanh", "Gelu",
                            "FastGelu", "BiasGelu", "QuickGelu", "Mish", "Softplus", "Elu",
                            "Selu", "Celu", "HardSwish", "Sin", "Cos"})
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where",
                    "Equal", "Greater", "Less", "And", "Or", "PRelu"})


def out_shapes(graph: PerfGraph) -> dict[int, tuple[int, ...]]:
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


def nan_guard(ops: Sequence[str], readers: Sequence[int], readers_of: Callable[[int], Sequence[int]]
              ) -> tuple[int, int] | None:
    """``(IsNaN, Where)`` when a Softmax's output is read by exactly the
    guard torch's dynamo export of ``scaled_dot_product_attention`` puts
    after it, ``Where(IsNaN(p), 0, p)`` (rows a mask left empty), else None
    (``readers``: the nodes reading the Softmax; ``readers_of(j)``: those
    reading node ``j``)."""
    if len(readers) != 2 or sorted(ops[j] for j in readers) != ["IsNaN", "Where"]:
        return None
    isnan, where = sorted(readers, key=lambda j: ops[j] != "IsNaN")
    return (isnan, where) if list(readers_of(isnan)) == [where] else None


def recurrent_shape(graph: PerfGraph, i: int, out_shape: tuple[int, ...] | None
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


def recurrent_kernels(op: str, steps: tuple[int, int, int], width: int, hidden: int,
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
