"""A PerfGraph as the tensors and operators PyTorch would run (the input of
:mod:`perfseer_rt.gpu.mem_schedule`).

* Tensors come from the PerfGraph's edges (one per ONNX tensor name, with
  its element count and element size); a node whose outputs feed nothing
  gets one output tensor of its ``out_elems`` (a graph output).
* Units are the operators PyTorch runs: one per node, except the fused
  patterns of :data:`perfseer_rt.gpu.autograd_rules.FUSED` (erf-GELU, SiLU,
  Linear + bias, scaled-dot-product attention), which become one unit.
* A unit's trainable weights are its float constant inputs (4 or 2 bytes
  per element, at least two elements, not a shape operand).
* ``folded_bn``: an eval-mode export folds each BatchNorm into the Conv
  before it (the Conv gains a bias) and drops Dropout. With
  ``folded_bn=True`` a Conv with a bias in a graph without any
  BatchNormalization node is taken as Conv + BatchNorm: PyTorch ran the
  convolution (its output kept for BatchNorm's backward), then BatchNorm
  (a second tensor; per-channel stats; weight and bias as parameters,
  running mean and variance as buffers); except where the Conv's output
  goes straight to a Reshape, Flatten, Transpose or LayerNormalization (a
  patch embedding, ConvNeXt), whose bias is taken as real. Where the file
  tells which Convs took a BatchNorm (``info["folded_batchnorm"]``: torch's
  exports, :func:`perfseer_rt.graph.exporter.exporter_folds`), those.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from perfseer_rt.gpu.autograd_rules import FUSED, NO_GRAD_OPS, Rule, rule
from perfseer_rt.gpu.kernels import erf_gelu_groups, nan_guard
from perfseer_rt.graph.perfgraph import PerfGraph

#: A Conv whose output goes straight to one of these keeps a real bias (a ViT patch
#: embedding, ConvNeXt's convolutions before their LayerNorm), not a folded BatchNorm.
NOT_FOLDED_NEXT = frozenset({"Reshape", "Flatten", "Transpose", "LayerNormalization", "Squeeze"})

#: Ops whose constant inputs are shapes, axes, indices or scales, not weights.
SHAPE_OPERAND_OPS = frozenset({"Reshape", "Expand", "Tile", "Slice", "Pad", "Resize", "Upsample",
                               "Squeeze", "Unsqueeze", "Split", "TopK", "ReduceMean", "ReduceSum",
                               "ReduceMax", "ReduceMin", "ConstantOfShape", "Range", "OneHot",
                               "CumSum", "Trilu", "Where", "Equal", "Clip", "Cast"})


@dataclass
class Tensor:
    name: str
    elems: float
    itemsize: float             #: bytes per element as exported
    producer: int = -1          #: unit index (-1: a graph input)
    consumers: list[int] = field(default_factory=list)
    float_: bool = True
    grad: bool = False          #: needs a gradient in training


@dataclass
class Unit:
    op: str                     #: ONNX op, or a FUSED pattern's name
    nodes: list[int]
    inputs: list[str]           #: data tensors read, in order
    outputs: list[str]
    rule: Rule
    known: bool = True
    weight_bytes: float = 0.0   #: trainable float weights as exported (bytes)
    bias_bytes: float = 0.0     #: of which a bias vector
    folded_bn: bool = False
    channels: float = 0.0       #: output channels (BatchNorm stats)
    rows: float = 0.0           #: normalized rows (LayerNorm stats)
    attn_rows: float = 0.0      #: batch x heads x query length (attention's log-sum-exp)


@dataclass
class MemGraph:
    tensors: dict[str, Tensor]
    units: list[Unit]
    inputs: list[str]           #: graph inputs (names), their tensors in ``tensors``
    notes: list[str] = field(default_factory=list)
    unknown_ops: list[str] = field(default_factory=list)
    folded_convs: int = 0
    #: tensor -> unit after which the Python caller lets it go (module arguments)
    hold: dict[str, int] = field(default_factory=dict)


def _scope(name: str) -> str | None:
    """The module scope of an exported node name (``/blocks/blocks.0/attn/qkv/MatMul``
    -> ``/blocks/blocks.0/attn/qkv``); None for names without one."""
    if not name.startswith("/"):
        return None
    return name.rsplit("/", 1)[0]


def _prefixes(scope: str) -> list[str]:
    parts = scope.split("/")[1:]
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def module_argument_holds(graph: PerfGraph, producer: dict[str, int], consumers: dict[str, list[int]]
                          ) -> dict[str, int]:
    """Tensor -> the last node of the outermost module it is an argument of.

    PyTorch frees a tensor when nothing references it; a module's caller
    holds the arguments it passed until the call returns (``nn.Sequential``
    holds each child's input, a ``forward`` its locals). The TorchScript
    exporter names nodes by module scope (``/blocks/blocks.3/mlp/fc1/MatMul``):
    a tensor made outside a scope and read inside it is that module's
    argument and lives at least to the scope's last node."""
    scopes = [_scope(n) for n in graph.node_names]
    last: dict[str, int] = {}
    for i, sc in enumerate(scopes):
        if sc:
            for pre in _prefixes(sc):
                last[pre] = i
    hold: dict[str, int] = {}
    for t, cons in consumers.items():
        p = producer.get(t)
        sp = scopes[p] if p is not None else None
        end = -1
        for c in cons:
            sc = scopes[c]
            if not sc:
                continue
            for pre in _prefixes(sc):
                if sp is not None and (sp == pre or sp.startswith(pre + "/")):
                    continue
                end = max(end, last[pre])
        if end > max(cons):
            hold[t] = end
    return hold


def _float_weights(graph: PerfGraph, i: int) -> float:
    """Bytes of node ``i``'s trainable float weights (see the module doc)."""
    w, n = float(graph.node_column("weight")[i]), float(graph.node_column("params")[i])
    if w <= 0 or n < 2 or graph.node_ops[i] in SHAPE_OPERAND_OPS:
        return 0.0
    per = w / n
    return w if 2.0 <= per <= 4.25 else 0.0   # float weights (a few int64 indices beside them)


def _edges(graph: PerfGraph) -> tuple[dict[str, Tensor], dict[int, list[str]], dict[int, list[str]]]:
    tensors: dict[str, Tensor] = {}
    outs: dict[int, list[str]] = {}
    ins: dict[int, list[str]] = {}
    if graph.num_edges:
        src, dst = graph.edge_index
        size, item = graph.edge_column("size"), graph.edge_column("dtype_bytes")
        for j, name in enumerate(graph.edge_tensors):
            s, d = int(src[j]), int(dst[j])
            t = tensors.get(name)
            if t is None:
                t = tensors[name] = Tensor(name, float(size[j]), float(item[j]) or 4.0)
                outs.setdefault(s, []).append(name)
            ins.setdefault(d, [])
            if name not in ins[d]:
                ins[d].append(name)
    return tensors, outs, ins


def _single(ins_of: dict[int, list[str]], consumers: dict[str, list[int]], name: str) -> int | None:
    c = consumers.get(name, [])
    return c[0] if len(c) == 1 else None


def _attention_groups(graph: PerfGraph, outs: dict[int, list[str]], ins: dict[int, list[str]],
                      producer: dict[str, int], consumers: dict[str, list[int]]) -> dict[int, list[int]]:
    """Softmax node -> the nodes of a scaled-dot-product attention around it:
    ``MatMul(q', k') -> [Mul|Div const] -> [Add mask] -> Softmax -> [Cast|Dropout]
    -> MatMul(p, v)`` (after the Softmax also dynamo's ``Where(IsNaN(p), 0, p)``)
    with every intermediate read by the next node only; ``q'``/``k'`` may be
    ``Mul(x, const)`` (the exporter's split scale), absorbed too."""
    ops = graph.node_ops
    weight = graph.node_column("weight")
    groups: dict[int, list[int]] = {}
    for s, op in enumerate(ops):
        if op != "Softmax" or len(ins.get(s, [])) != 1 or len(outs.get(s, [])) != 1:
            continue
        members = [s]
        after = _single(ins, consumers, outs[s][0])
        guard = nan_guard(ops, consumers.get(outs[s][0], []),
                          lambda j: consumers.get(outs[j][0], []) if outs.get(j) else [])
        if after is None and guard is not None and outs.get(guard[1]):
            members += list(guard)
            after = _single(ins, consumers, outs[guard[1]][0])
        while after is not None and ops[after] in ("Cast", "Dropout", "Identity") and len(outs.get(after, [])) >= 1:
            members.append(after)   # GPT-2's attn_weights.type(value.dtype); a training export's dropout
            after = _single(ins, consumers, outs[after][0])
        if after is None or ops[after] != "MatMul" or weight[after] > 0 or len(ins.get(after, [])) != 2:
            continue
        members.append(after)
        cur = producer.get(ins[s][0])
        while cur is not None and ops[cur] in ("Mul", "Div", "Add") and len(outs.get(cur, [])) == 1 \
                and _single(ins, consumers, outs[cur][0]) is not None:
            members.append(cur)
            data = ins.get(cur, [])
            cur = producer.get(data[0]) if data else None
        if cur is None or ops[cur] != "MatMul" or weight[cur] > 0 or len(ins.get(cur, [])) != 2 \
                or _single(ins, consumers, outs[cur][0]) is None:
            continue
        members.append(cur)
        for t in ins[cur]:  # the exporter's sqrt(scale) on q and on k^T
            p = producer.get(t)
            if p is not None and ops[p] == "Mul" and len(ins.get(p, [])) == 1 \
                    and _single(ins, consumers, t) == cur:
                members.append(p)
        groups[s] = sorted(members)
    return groups


def build(graph: PerfGraph, folded_bn: bool = True, fused_attention: bool = True,
          input_itemsize: dict[str, float] | None = None) -> MemGraph:
    """The tensors and units of ``graph`` (see the module doc);
    ``input_itemsize``: bytes per element of the graph inputs (4 where not given)."""
    tensors, outs, ins = _edges(graph)
    ops = graph.node_ops
    col = graph.node_column
    n = graph.num_nodes
    out_elems = col("out_elems")
    for i in range(n):
        if i not in outs:  # a graph output: one tensor of the node's output elements
            name = f"<out:{i}>"
            item = tensors[ins[i][0]].itemsize if ins.get(i) else 4.0
            tensors[name] = Tensor(name, float(out_elems[i]), item)
            outs[i] = [name]
    producer = {t: i for i, names in outs.items() for t in names}
    consumers: dict[str, list[int]] = {}
    for i, names in ins.items():
        for t in names:
            consumers.setdefault(t, []).append(i)
    # graph inputs: tensors a node reads that no node produces (not edges)
    inputs = []
    for name, shape in graph.input_shapes.items():
        elems = float(np.prod(shape)) if len(shape) else 1.0
        item = (input_itemsize or {}).get(name, 4.0)
        tensors[name] = Tensor(name, elems, item, float_=item in (2.0, 4.0))
        inputs.append(name)
    # which nodes read a graph input (inputs are not edges): a node with fewer
    # incoming tensors than data inputs reads the graph input of its first
    # input's size (else the first graph input)
    n_in, in_el = col("num_inputs"), col("in_elems")
    for i in range(n):
        if inputs and int(n_in[i]) > len(ins.get(i, [])):
            pick = next((x for x in inputs if tensors[x].elems == in_el[i]), None)
            if pick is None and not ins.get(i):
                pick = inputs[0]
            if pick is not None and pick not in ins.get(i, []):
                ins.setdefault(i, []).insert(0, pick)
                consumers.setdefault(pick, []).append(i)

    # fused patterns: node -> (pattern, anchor)
    member: dict[int, int] = {}
    pattern: dict[int, str] = {}
    for anchor, group in erf_gelu_groups(graph).items():
        for j in group:
            member[j] = anchor
        pattern[anchor] = "Gelu"
    if fused_attention:
        for anchor, group in _attention_groups(graph, outs, ins, producer, consumers).items():
            if any(j in member for j in group):
                continue
            for j in group:
                member[j] = anchor
            pattern[anchor] = "Attention"
    weights = [_float_weights(graph, i) for i in range(n)]
    for i, op in enumerate(ops):
        if i in member or len(outs[i]) != 1:
            continue
        nxt = _single(ins, consumers, outs[i][0])
        if nxt is None or nxt in member:
            continue
        if op == "Sigmoid" and ops[nxt] == "Mul" and ins.get(i) and ins[i][0] in ins.get(nxt, []):
            member[i] = member[nxt] = nxt
            pattern[nxt] = "SiLU"
        elif op == "MatMul" and weights[i] > 0 and ops[nxt] == "Add" and weights[nxt] > 0 \
                and len(ins.get(nxt, [])) == 1:
            member[i] = member[nxt] = i
            pattern[i] = "Linear"

    has_bn = "BatchNormalization" in ops
    named = graph.info.get("folded_batchnorm")
    named_bn = {int(i) for i in named} if folded_bn and named is not None else None
    units: list[Unit] = []
    unit_of: dict[int, int] = {}
    unknown: list[str] = []
    folded = 0
    groups: dict[int, list[int]] = {}
    for j, a in sorted(member.items()):
        groups.setdefault(a, []).append(j)
    for i in range(n):
        anc = member.get(i)
        if anc is not None and i != groups[anc][-1]:
            continue  # a pattern becomes one unit where its last node runs
        nodes = groups[anc] if anc is not None else [i]
        inside = set(nodes)
        produced = {t for j in nodes for t in outs[j]}
        u_in = [t for j in nodes for t in ins.get(j, []) if t not in produced]
        u_in = list(dict.fromkeys(u_in))
        u_out = [t for j in nodes for t in outs[j]
                 if any(c not in inside for c in consumers.get(t, [])) or not consumers.get(t)]
        if anc is not None:
            name = pattern[anc]
            r, known = FUSED[name], True
        else:
            name = ops[i]
            r, known = rule(name)
            if not known:
                unknown.append(name)
        u = Unit(name, nodes, u_in, u_out, r, known,
                 weight_bytes=float(sum(weights[j] for j in nodes)))
        last = nodes[-1]
        u.channels = float(col("out_channels")[last])
        if col("has_bias")[nodes[0]] and ops[nodes[0]] in ("Conv", "Gemm", "ConvTranspose"):
            u.bias_bytes = float(col("out_channels")[nodes[0]]) * (weights[nodes[0]] / max(col("params")[nodes[0]], 1))
        if name == "Linear":
            u.bias_bytes = weights[nodes[-1]]
        if name in ("LayerNormalization", "SimplifiedLayerNormalization"):
            u.rows = float(out_elems[i]) / max(u.channels, 1.0)
        if name in ("GroupNormalization", "InstanceNormalization"):
            u.rows = u.channels * float(graph.globals["batch_size"])
        if name == "Attention" and anc is not None:
            sm_shape = next((graph.edge_shapes[j] for j, t in enumerate(graph.edge_tensors)
                             if t == outs[anc][0]), None) if graph.edge_shapes else None
            last_dim = float(sm_shape[-1]) if sm_shape else 1.0
            u.attn_rows = float(out_elems[anc]) / max(last_dim, 1.0)
        if named_bn is not None:
            folds = ops[i] == "Conv" and i in named_bn
        else:
            folds = ops[i] == "Conv" and folded_bn and not has_bn and bool(col("has_bias")[i]) and not any(
                ops[c] in NOT_FOLDED_NEXT for t in outs[i] for c in consumers.get(t, []))
        if folds:
            u.folded_bn = True
            folded += 1
        for j in nodes:
            unit_of[j] = len(units)
        units.append(u)

    # producers, consumers and gradients per unit
    for k, u in enumerate(units):
        for t in u.outputs:
            tensors[t].producer = k
        for t in u.inputs:
            tensors[t].consumers.append(k)
    for u in units:
        needs = u.weight_bytes > 0 or any(tensors[t].grad for t in u.inputs)
        for t in u.outputs:
            tt = tensors[t]
            tt.float_ = tt.itemsize in (2.0, 4.0) and u.op not in NO_GRAD_OPS
            tt.grad = needs and tt.float_
    holds = module_argument_holds(graph, producer, consumers)
    hold = {t: unit_of[j] for t, j in holds.items() if t in tensors and j in unit_of}
    notes = []
    if folded:
        notes.append(f"{folded} Conv node(s) with a bias in a graph without BatchNormalization taken as "
                     "Conv + BatchNorm folded by an eval-mode export (training keeps both tensors, "
                     "the BatchNorm statistics and parameters)")
    return MemGraph(tensors, units, inputs, notes, unknown, folded, hold)
