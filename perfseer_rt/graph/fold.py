"""Which nodes are folded away: Constant nodes and shape-computing subgraphs.

With every input shape static, a ``Shape`` node's output is a constant, and
so is the output of any node whose inputs are all constants (initializers,
Constant outputs, Shape outputs, ...). Such nodes are not PerfGraph nodes:
an inference engine folds them at load time (weight transposes, casts) or
computes them at run time from the input shapes (``Shape -> Gather ->
Concat -> Reshape`` chains). Folded outputs
computed from weights alone are weights when a kept node reads them; those
computed from a ``Shape``/``Size`` (:func:`shape_derived`) depend on the
input shapes, so the runtime computes them on every call when the model's
batch is dynamic: they are not weights (ScatterND indices expanded to the
batch, attention masks, position ids). They stay constant inputs of the
nodes that read them (the node's ``weight``/``params`` columns: what it
reads that is not computed by another node) but never count in the model's
unique weights (``weight_total``, ``params_total``, the memory parts).
"""

from __future__ import annotations

import onnx

from perfseer_rt.graph.nodes import Row, has_subgraph, node_table

#: Ops whose output depends only on the *shape* of their input.
SHAPE_OF = frozenset({"Shape", "Size"})
#: Ops that are never constant even with constant inputs.
NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                              "RandomUniformLike", "Multinomial", "Bernoulli"})
#: Ops kept even on constant inputs: runtimes keep the low-precision weight
#: and dequantize (or fuse) at run time, so the weight's stored bytes count.
KEPT_ON_CONSTANTS = frozenset({"DequantizeLinear"})


def fold_static(model: onnx.ModelProto, initializers: set[str],
                table: list[Row] | None = None) -> tuple[set[str], list[int]]:
    """Find the constant tensors and the nodes that stay in the PerfGraph.

    Args:
        model: the model (or its shape-inference skeleton).
        initializers: names of the original model's initializers.
        table: the graph's node table (:mod:`perfseer_rt.graph.nodes`),
            when the caller has read it.

    Returns:
        (constant tensor names, indices of the kept nodes in graph order).
    """
    if table is None:
        table = node_table(model.graph)
    const: set[str] = set(initializers)
    # "" (an absent optional input) counts as constant while folding, so that
    # one set test decides a node; it is in the result only if an
    # initializer is so named
    named_empty = "" in const
    const.add("")
    kept: list[int] = []
    for i, row in enumerate(table):  # topologically sorted
        op, _, domain, ins, outs = row[:5]
        if op in NONDETERMINISTIC or op in KEPT_ON_CONSTANTS or row[7] and has_subgraph(row):
            kept.append(i)
            continue
        if const.issuperset(ins) or op in SHAPE_OF and domain in ("", "ai.onnx"):
            const.update(outs)
        else:
            kept.append(i)
    if not named_empty:
        const.discard("")
    return const, kept


#: Ops that, folded on a constant, give the same weight in another layout or
#: type: exporters share one weight among several users through ``Identity``
#: nodes (equal tensors deduplicated, ALBERT's shared layers), or through a
#: transpose or reshape of it; the runtime then holds one copy.
SAME_WEIGHT = frozenset({"Identity", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Cast"})


def weight_roots(table: list[Row], const: set[str]) -> dict[str, str]:
    """``constant tensor -> the tensor it is the same weight as`` for the
    folded outputs of :data:`SAME_WEIGHT` ops whose first input is a constant
    (followed through chains, so every alias names the first tensor of its
    chain). Tensors that are their own root are not listed.

    Args:
        table: the graph's node table, as for :func:`fold_static`.
        const: the constant tensors (:func:`fold_static`'s first result).
    """
    root: dict[str, str] = {}
    for row in table:  # topologically sorted
        op, _, domain, ins, outs = row[:5]
        if op in SAME_WEIGHT and domain in ("", "ai.onnx") and ins and ins[0] in const \
                and outs and outs[0] in const:
            root[outs[0]] = root.get(ins[0], ins[0])
    return root


def shape_derived(table: list[Row], const: set[str]) -> set[str]:
    """The constant tensors whose value depends on a ``Shape``/``Size``
    output (directly or through other folded nodes): what the runtime
    computes from the input shapes rather than holds as weights.

    Args:
        table: the graph's node table, as for :func:`fold_static`.
        const: the constant tensors (:func:`fold_static`'s first result).
    """
    derived: set[str] = set()
    for row in table:  # topologically sorted
        op, _, domain, ins, outs = row[:5]
        if not outs or outs[0] not in const:
            continue
        if op in SHAPE_OF and domain in ("", "ai.onnx") or not derived.isdisjoint(ins):
            derived.update(o for o in outs if o in const)
    return derived
