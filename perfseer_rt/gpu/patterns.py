"""Patterns of an exported graph that PyTorch eager runs differently from
the ONNX node list: found here, priced by :mod:`perfseer_rt.gpu.eager`.

An exported ONNX graph spells out what PyTorch runs as one kernel, and
drops what PyTorch runs apart:

* **attention** (``MatMul(q, k^T) [* scale] [+ mask] -> Softmax -> MatMul(., v)``,
  and the scaling of ``q`` and ``k`` that the exporter writes for
  ``scaled_dot_product_attention``): one fused SDPA kernel (flash or
  memory-efficient attention) in PyTorch >= 2.0 (:func:`attention_groups`);
* **activations** PyTorch runs as one kernel: erf-GELU (five nodes),
  SiLU (``Sigmoid`` and ``Mul``), Mish (``Softplus``, ``Tanh``, ``Mul``)
  (:func:`activation_groups`);
* **linear layers**: ``MatMul(x, W)`` then ``Add(bias)``: one ``addmm``
  (:func:`linear_bias`);
* **folded BatchNorm**: an eval-mode export folds BatchNorm into the Conv
  before it (the Conv gains a bias); PyTorch eager runs the BatchNorm as its
  own kernel (:func:`folded_batchnorm`);
* **views**: reshapes, squeezes, splits, slices, expands and most
  transposes are strided views in PyTorch, not copies (:func:`view_nodes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from perfseer_rt.gpu.kernels import erf_gelu_groups, nan_guard
from perfseer_rt.graph.perfgraph import PerfGraph

NORM_OPS = frozenset({"LayerNormalization", "BatchNormalization", "GroupNormalization",
                      "InstanceNormalization", "SkipLayerNormalization",
                      "SimplifiedLayerNormalization", "RMSNormalization"})
#: Ops that are views of their input in PyTorch (no kernel), always.
ALWAYS_VIEW = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout",
                         "Expand", "Split", "Slice"})
#: Consumers that read a transposed (strided) tensor without a copy first.
STRIDED_READERS = frozenset({"MatMul", "Add", "Sub", "Mul", "Div", "Squeeze", "Unsqueeze",
                             "Split", "Slice", "Relu", "Sigmoid", "Tanh", "Erf", "Gelu",
                             "Transpose", "Where", "Cast"})
SCALE_OPS = frozenset({"Mul", "Div"})
MASK_OPS = frozenset({"Add", "Where", "Sub"})


@dataclass
class Adjacency:
    """Successors and predecessors of every node (node -> node edges)."""

    succ: list[list[int]] = field(default_factory=list)
    pred: list[list[int]] = field(default_factory=list)
    #: (src, dst) -> elements of the tensor on that edge
    edge_elems: dict[tuple[int, int], float] = field(default_factory=dict)

    @classmethod
    def of(cls, graph: PerfGraph) -> "Adjacency":
        n = graph.num_nodes
        adj = cls([[] for _ in range(n)], [[] for _ in range(n)])
        if graph.num_edges:
            size = graph.edge_column("size")
            for j, (a, b) in enumerate(zip(graph.edge_index[0].tolist(), graph.edge_index[1].tolist())):
                if b not in adj.succ[a]:
                    adj.succ[a].append(b)
                    adj.pred[b].append(a)
                adj.edge_elems[(a, b)] = adj.edge_elems.get((a, b), 0.0) + float(size[j])
        return adj


def _scalar_const(graph: PerfGraph, i: int) -> bool:
    """Node ``i`` reads one constant of at most one element (a scale)."""
    return float(graph.node_column("params")[i]) <= 1.0


@dataclass(frozen=True)
class Attention:
    """One attention pattern: its nodes and the GEMM views of its halves."""

    nodes: tuple[int, ...]
    qk: int
    softmax: int
    av: int
    heads_batch: float   #: batch x heads
    seq_q: float
    seq_k: float
    head_dim: float
    mask_elems: float    #: elements of an added mask/bias tensor (0: none)


def attention_groups(graph: PerfGraph, adj: Adjacency) -> list[Attention]:
    """Every ``MatMul -> [scale] -> [mask] -> Softmax -> [Dropout] -> MatMul``
    (after the Softmax also dynamo's ``Where(IsNaN(p), 0, p)``)
    whose MatMuls both read data (no weights), with the scalar scalings of
    the first MatMul's inputs and the transposes of k before them."""
    ops, weight = graph.node_ops, graph.node_column("weight")
    out_elems = graph.node_column("out_elems")
    groups = []
    params = graph.node_column("params")
    for s, op in enumerate(ops):
        if op != "Softmax" or len(adj.pred[s]) != 1:
            continue
        chain: list[int] = []
        mask_elems, cur = 0.0, adj.pred[s][0]
        for _ in range(3):
            if ops[cur] == "MatMul" or len(adj.succ[cur]) != 1:
                break
            if ops[cur] in SCALE_OPS and _scalar_const(graph, cur) and len(adj.pred[cur]) == 1:
                chain.append(cur)
                cur = adj.pred[cur][0]
                continue
            if ops[cur] in MASK_OPS:
                up = [p for p in adj.pred[cur] if ops[p] == "MatMul" or ops[p] in SCALE_OPS]
                if not up:
                    break
                others = [p for p in adj.pred[cur] if p != up[0]]
                mask_elems = float(params[cur]) + sum(adj.edge_elems.get((p, cur), 0.0) for p in others)
                chain.append(cur)
                cur = up[0]
                continue
            break
        qk = cur
        if ops[qk] != "MatMul" or weight[qk] > 0 or len(adj.succ[qk]) != 1:
            continue
        nxt = adj.succ[s]
        after = [s]
        guard = nan_guard(ops, nxt, lambda j: adj.succ[j])
        if guard is not None:
            after += list(guard)
            nxt = adj.succ[guard[1]]
        while len(nxt) == 1 and ops[nxt[0]] in ("Dropout", "Cast", "Identity"):
            after.append(nxt[0])
            nxt = adj.succ[nxt[0]]
        if len(nxt) != 1 or ops[nxt[0]] != "MatMul" or weight[nxt[0]] > 0:
            continue
        av = nxt[0]
        scales = [p for p in adj.pred[qk] if ops[p] in SCALE_OPS and _scalar_const(graph, p)
                  and len(adj.succ[p]) == 1]
        # scaled_dot_product_attention exported as its math (both operands
        # scaled by sqrt(scale)) transposes k on the way: a Transpose
        # (TorchScript) or Reshape -> Transpose -> Reshape (dynamo), inside
        # the fused kernel
        for p in list(scales):
            up = adj.pred[p]
            while len(up) == 1 and ops[up[0]] in ("Transpose", "Reshape") and len(adj.succ[up[0]]) == 1:
                scales.append(up[0])
                up = adj.pred[up[0]]
        scores = float(out_elems[qk])
        out = float(out_elems[av])
        shape = _shape_of(graph, qk)  # scores: [..., sq, sk]; out: [..., sq, d]
        if scores <= 0 or out <= 0 or not shape or len(shape) < 2:
            continue
        sq, sk = float(shape[-2]), float(shape[-1])
        bh = scores / max(sq * sk, 1.0)
        members = tuple(sorted(set([qk, av] + chain + after + scales)))
        groups.append(Attention(members, qk, s, av, bh, sq, sk, out / max(bh * sq, 1.0), mask_elems))
    return groups


def _shape_of(graph: PerfGraph, i: int) -> tuple[int, ...] | None:
    """The output shape of node ``i`` (from an edge it feeds)."""
    if not graph.num_edges:
        return None
    src = graph.edge_index[0]
    hits = np.flatnonzero(src == i)
    return tuple(graph.edge_shapes[int(hits[0])]) if len(hits) else None


def activation_groups(graph: PerfGraph, adj: Adjacency) -> dict[int, tuple[list[int], str]]:
    """Anchor node -> (the nodes PyTorch runs as one activation kernel, its
    name): erf-GELU, SiLU, Mish."""
    ops = graph.node_ops
    out: dict[int, tuple[list[int], str]] = {e: (g, "gelu") for e, g in erf_gelu_groups(graph).items()}
    for s, op in enumerate(ops):
        if op == "Sigmoid" and len(adj.pred[s]) == 1 and len(adj.succ[s]) == 1:
            x, mul = adj.pred[s][0], adj.succ[s][0]
            if ops[mul] == "Mul" and set(adj.pred[mul]) == {x, s}:
                out[s] = ([s, mul], "silu")
        elif op == "Softplus" and len(adj.pred[s]) == 1 and len(adj.succ[s]) == 1:
            x, tanh = adj.pred[s][0], adj.succ[s][0]
            if ops[tanh] == "Tanh" and len(adj.succ[tanh]) == 1:
                mul = adj.succ[tanh][0]
                if ops[mul] == "Mul" and set(adj.pred[mul]) == {x, tanh}:
                    out[s] = ([s, tanh, mul], "mish")
    return out


def linear_bias(graph: PerfGraph, adj: Adjacency) -> dict[int, int]:
    """MatMul node -> the ``Add`` of its bias (a constant of its output
    width), for ``MatMul(x, W) + b`` that PyTorch runs as one addmm."""
    ops, weight = graph.node_ops, graph.node_column("weight")
    params, cout = graph.node_column("params"), graph.node_column("out_channels")
    out = {}
    for i, op in enumerate(ops):
        if op == "MatMul" and weight[i] > 0 and len(adj.succ[i]) == 1:
            a = adj.succ[i][0]
            if ops[a] == "Add" and adj.pred[a] == [i] and 0 < params[a] <= max(cout[i], 1.0):
                out[i] = a
    return out


def folded_batchnorm(graph: PerfGraph, adj: Adjacency) -> set[int]:
    """Conv nodes after which PyTorch eager runs a BatchNorm the export
    folded away: Convs with a bias whose output reaches no normalization
    (through views), in a graph that has no BatchNormalization node left
    (an export that kept them did not fold any). Where the file tells
    which Convs took a BatchNorm (``info["folded_batchnorm"]``: torch's
    exports, :func:`perfseer_rt.graph.exporter.exporter_folds`), those."""
    ops = graph.node_ops
    named = graph.info.get("folded_batchnorm")
    if named is not None:
        return {int(i) for i in named}
    if "BatchNormalization" in ops:
        return set()
    bias = graph.node_column("has_bias")
    views = ALWAYS_VIEW | {"Transpose"}
    out = set()
    for i, op in enumerate(ops):
        if op != "Conv" or bias[i] < 0.5:
            continue
        frontier, seen, normed = list(adj.succ[i]), set(), False
        while frontier:
            j = frontier.pop()
            if j in seen:
                continue
            seen.add(j)
            if ops[j] in NORM_OPS:
                normed = True
                break
            if ops[j] in views:
                frontier += adj.succ[j]
        if not normed:
            out.add(i)
    return out


def folded_pads(graph: PerfGraph) -> set[int]:
    """Conv nodes into which a dynamo export's rewriter folded the
    ``F.pad`` PyTorch eager runs before them as its own kernel (a TorchScript
    export keeps that Pad node)."""
    return {int(i) for i in graph.info.get("folded_pads", ())}


def view_host_ops(graph: PerfGraph, adj: Adjacency, views: set[int]) -> dict[int, float]:
    """Framework ops each view node stands for, where not one: a Squeeze of
    a Split or Slice output is part of that op (``unbind``, ``chunk``:
    0), and Slices of one tensor that each feed a Squeeze are one
    ``unbind`` between them (TorchScript writes ``unbind`` as Split + Squeezes,
    dynamo as Slices + Squeezes)."""
    ops = graph.node_ops
    out: dict[int, float] = {}
    unbinds: dict[int, list[int]] = {}
    for i in views:
        if ops[i] == "Squeeze" and len(adj.pred[i]) == 1 and ops[adj.pred[i][0]] in ("Split", "Slice"):
            out[i] = 0.0
        elif ops[i] == "Slice" and len(adj.pred[i]) == 1 and adj.succ[i] \
                and all(ops[j] == "Squeeze" for j in adj.succ[i]):
            unbinds.setdefault(adj.pred[i][0], []).append(i)
    for group in unbinds.values():
        for i in group:
            out[i] = 1.0 / len(group)
    return out


def view_nodes(graph: PerfGraph, adj: Adjacency) -> set[int]:
    """Nodes PyTorch runs as views (no kernel): :data:`ALWAYS_VIEW`, a
    Transpose all of whose readers take strided input, a Gather of one index
    (``x[:, 0]``)."""
    ops = graph.node_ops
    out_elems, in_elems = graph.node_column("out_elems"), graph.node_column("in_elems")
    views = set()
    for i, op in enumerate(ops):
        if op in ALWAYS_VIEW:
            views.add(i)
        elif op == "Transpose" and adj.succ[i] and all(ops[j] in STRIDED_READERS for j in adj.succ[i]):
            views.add(i)
        elif op == "Gather" and graph.node_column("weight")[i] <= 8 and out_elems[i] < in_elems[i]:
            views.add(i)
    return views
