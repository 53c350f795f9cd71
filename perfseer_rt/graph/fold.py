"""Which nodes are folded away: Constant nodes and shape-computing subgraphs.

With every input shape static, a ``Shape`` node's output is a constant, and
so is the output of any node whose inputs are all constants (initializers,
Constant outputs, Shape outputs, ...). Such nodes are what an inference
engine folds at load time (``Shape -> Gather -> Concat -> Reshape`` chains,
weight transposes); they are not PerfGraph nodes, and their outputs count as
constants (weights when a kept node consumes them as data).
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
