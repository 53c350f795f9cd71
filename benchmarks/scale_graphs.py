"""Large graphs for extraction's scaling benchmarks and tests.

* :func:`transformer` -- ``tests/models/bert_base.onnx`` (BERT-base as
  torch's TorchScript exporter writes it, structure-only) with its encoder
  layer copied: 107 nodes a layer (the Q/K/V/output projections, heads split
  and merged by ``Reshape`` nodes whose targets ``Shape -> Gather ->
  Unsqueeze -> Concat`` subgraphs compute, a ``Constant`` node per index and
  axis, the masked softmax, the erf GELU MLP, two LayerNormalizations, the
  Identity nodes torch passes biases through); ``transformer(12)`` is the
  file's graph (1,405 nodes), ``transformer(934)`` has 100,059 nodes.
* :func:`if_chain` -- ``n`` If nodes in a chain, each with a two-node
  then-branch and a one-node else-branch that read the previous If's output
  from the outer scope; the condition is a graph input, unknown before run
  time, so every If is costed as its heavier branch.

Both are deterministic; the bytes are built in memory.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

BERT_BASE = Path(__file__).resolve().parents[1] / "tests" / "models" / "bert_base.onnx"
#: Layers of :func:`transformer` that make a graph of about 100,000 nodes.
LAYERS_100K = 934


def _layer_span(graph: onnx.GraphProto) -> tuple[int, int]:
    """Positions of the last node of encoder layer 0 and of layer 1: the
    second and fourth LayerNormalization after the embeddings' one."""
    ln = [i for i, n in enumerate(graph.node) if n.op_type == "LayerNormalization"]
    return ln[2], ln[4]


def transformer(layers: int) -> bytes:
    """``tests/models/bert_base.onnx`` (a TorchScript export of BERT-base,
    structure-only) with ``layers`` encoder layers: its embeddings and
    layer 0, then copies of its layer 1 (97 nodes: the Q/K/V projections,
    heads split and merged by Reshapes whose targets ``Shape -> Gather ->
    Unsqueeze -> Concat`` subgraphs compute, a Constant per index, the
    masked softmax, the erf GELU MLP, two LayerNormalizations), each copy
    with its own tensors and weights (dangling external references, dims
    only) and reading the previous copy's output; plus the Identity nodes
    through which torch passes each copy's biases (10 a layer). Inputs
    ``input_ids`` and ``attention_mask`` (dims ``batch`` x ``seq``).
    ``transformer(12)`` has the file's node count and op mix."""
    model = onnx.load(str(BERT_BASE), load_external_data=False)
    g = model.graph
    first, last = _layer_span(g)
    body = list(g.node[first + 1:last + 1])
    inits = {t.name: t for t in g.initializer}
    made_by = {o: n for n in g.node for o in n.output}
    inside = {o for n in body for o in n.output}
    entry, layer_out = g.node[first].output[0], g.node[last].output[0]
    # the tensors it reads from outside: weights (initializers, or Identity
    # nodes of initializers) copied per layer, anything else shared
    weights = sorted({i for n in body for i in n.input if i and i not in inside and i != entry
                      and (i in inits or made_by[i].op_type == "Identity")})
    head = list(g.node[:first + 1])
    read = {i for n in head if n.op_type != "Identity" for i in n.input}
    nodes = [n for n in head if n.op_type != "Identity" or n.output[0] in read]
    new_inits: list[TensorProto] = []
    prev = entry
    for k in range(1, layers):
        rename = {t: f"{t}.{k}" for t in inside}
        rename[entry] = prev
        for w in weights:
            rename[w] = f"{w}.{k}"
            t = TensorProto()
            t.CopyFrom(inits[w] if w in inits else inits[made_by[w].input[0]])
            if w in inits:
                t.name = rename[w]
            else:  # torch passes a bias through an Identity node
                t.name = rename[w] + ".data"
                nodes.append(helper.make_node("Identity", [t.name], [rename[w]],
                                              name=f"Identity_{rename[w]}"))
            new_inits.append(t)
        for n in body:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            c.name = f"{n.name}.{k}"
            c.input[:] = [rename.get(i, i) for i in n.input]
            c.output[:] = [rename.get(o, o) for o in n.output]
            nodes.append(c)
        prev = rename[layer_out]
    used = {i for n in nodes for i in n.input}
    kept_inits = [t for t in g.initializer if t.name in used] + new_inits
    del g.node[:], g.initializer[:]
    g.node.extend(nodes)
    g.initializer.extend(kept_inits)
    g.output[0].name = prev
    del g.value_info[:]
    return model.SerializeToString()


def if_chain(n: int) -> bytes:
    """``n`` If nodes in a chain (see the module docstring) as ONNX bytes;
    inputs ``x`` (float32 [batch, 64]) and ``flag`` (bool scalar)."""
    nodes, prev = [], "x"
    for i in range(n):
        then = helper.make_graph(
            [helper.make_node("Relu", [prev], [f"t{i}"]), helper.make_node("Sigmoid", [f"t{i}"], [f"tt{i}"])],
            f"then{i}", [], [helper.make_tensor_value_info(f"tt{i}", TensorProto.FLOAT, None)])
        other = helper.make_graph([helper.make_node("Neg", [prev], [f"e{i}"])], f"else{i}", [],
                                  [helper.make_tensor_value_info(f"e{i}", TensorProto.FLOAT, None)])
        nodes.append(helper.make_node("If", ["flag"], [f"y{i}"], name=f"if{i}", then_branch=then,
                                      else_branch=other))
        prev = f"y{i}"
    graph = helper.make_graph(
        nodes, "if_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
