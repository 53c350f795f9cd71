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

#: Ops whose output depends only on the *shape* of their input.
SHAPE_OF = frozenset({"Shape", "Size"})
#: Ops that are never constant even with constant inputs.
NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                              "RandomUniformLike", "Multinomial", "Bernoulli"})
#: Ops kept even on constant inputs: runtimes keep the low-precision weight
#: and dequantize (or fuse) at run time, so the weight's stored bytes count.
KEPT_ON_CONSTANTS = frozenset({"DequantizeLinear"})


def fold_static(model: onnx.ModelProto, initializers: set[str]) -> tuple[set[str], list[int]]:
    """Find the constant tensors and the nodes that stay in the PerfGraph.

    Args:
        model: the model (or its shape-inference skeleton).
        initializers: names of the original model's initializers.

    Returns:
        (constant tensor names, indices of the kept nodes in graph order).
    """
    g = model.graph
    const: set[str] = set(initializers)
    kept: list[int] = []
    for i, node in enumerate(g.node):  # ONNX graphs are topologically sorted
        if node.op_type in NONDETERMINISTIC or node.op_type in KEPT_ON_CONSTANTS or node.attribute and any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                for a in node.attribute):
            kept.append(i)
            continue
        if node.op_type in SHAPE_OF and node.domain in ("", "ai.onnx"):
            static = True
        else:
            static = all(name == "" or name in const for name in node.input)
        if static:
            const.update(o for o in node.output if o)
        else:
            kept.append(i)
    return const, kept
