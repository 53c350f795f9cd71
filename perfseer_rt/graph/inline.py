"""Model-local functions expanded into the graph before extraction.

Exporters that keep module structure (torch's dynamo exporter, onnxscript)
write layers as model-local functions (``ModelProto.functions``) and call
them as nodes of a custom domain. A call is not an operator the cost rules
know: left alone, the work inside every function would count as one unknown
node of no cost. onnx's inliner replaces each call by the function's body
(nested calls and calls inside If/Loop bodies included); the size the
inlined graph would have is counted first, so a function that calls itself,
or calls that multiply past the node cap, are a clear error instead of a
hang or an exhausted memory.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx
import onnx.inliner

from perfseer_rt.errors import GraphError, LimitError

FunctionKey = tuple[str, str, str]


def inline_functions(proto: onnx.ModelProto, name: str, max_nodes: int) -> onnx.ModelProto:
    """``proto`` with its model-local functions inlined (a new ModelProto;
    ``proto`` itself when it has none).

    Raises:
        GraphError: a function calls itself, or onnx cannot inline them.
        LimitError: the inlined graph would have more than ``max_nodes`` nodes.
    """
    if not len(proto.functions):
        return proto
    functions = {_key(f.domain, f.name, f.overload): f for f in proto.functions}
    sizes: dict[FunctionKey, int] = {}
    total = _size(_nodes_of(proto.graph.node), functions, sizes, (), name, max_nodes)
    if total > max_nodes:
        raise LimitError(f"{name}: with its model-local functions inlined it has more than "
                         f"{max_nodes:,} nodes (node cap); pass a larger max_nodes if the "
                         "model is really this large")
    try:
        inlined = onnx.inliner.inline_local_functions(proto, convert_version=False)
    except Exception as exc:  # noqa: BLE001 - onnx's C++ errors have no common type
        raise GraphError(f"{name}: its model-local functions cannot be inlined "
                         f"({type(exc).__name__}: {str(exc)[:200]})") from None
    del inlined.functions[:]  # every call is expanded; what is left is unused
    return inlined


def _key(domain: str, name: str, overload: str) -> FunctionKey:
    return (domain or "", name, overload or "")


def _nodes_of(nodes: Iterable[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """``nodes`` and the nodes of their subgraphs (If/Loop/Scan bodies), at any depth."""
    out: list[onnx.NodeProto] = []
    stack = [iter(nodes)]
    while stack:
        for node in stack.pop():
            out.append(node)
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    stack.append(iter(a.g.node))
                elif a.type == onnx.AttributeProto.GRAPHS:
                    stack.extend(iter(g.node) for g in a.graphs)
    return out


def _size(nodes: list[onnx.NodeProto], functions: dict[FunctionKey, onnx.FunctionProto],
          sizes: dict[FunctionKey, int], calling: tuple[FunctionKey, ...], name: str,
          cap: int) -> int:
    """Nodes that ``nodes`` become once inlined (counting stops soon after ``cap``)."""
    total = 0
    for node in nodes:
        key = _key(node.domain, node.op_type, node.overload)
        fn = functions.get(key)
        if fn is None:
            total += 1
        else:
            if key in calling:
                raise GraphError(f"{name}: model-local function {key[1]!r} calls itself; "
                                 "such a model cannot run")
            size = sizes.get(key)
            if size is None:
                size = sizes[key] = _size(_nodes_of(fn.node), functions, sizes,
                                          (*calling, key), name, cap)
            total += size
        if total > cap:
            break
    return total


def inline_branches(proto: onnx.ModelProto, picks: dict[str, str]) -> onnx.ModelProto:
    """``proto`` (a copy) with each top-level If whose first output is in
    ``picks`` replaced by the nodes and initializers of the branch named
    there (``then_branch`` / ``else_branch``): the branch's outputs take the
    If's output names (an Identity where a branch output is not computed in
    the branch)."""
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    g = m.graph
    nodes: list[onnx.NodeProto] = []
    for n in g.node:
        pick = picks.get(n.output[0]) if n.op_type == "If" and not n.domain and n.output else None
        branch = next((a.g for a in n.attribute if a.name == pick
                       and a.type == onnx.AttributeProto.GRAPH), None) if pick else None
        if branch is None:
            nodes.append(n)
            continue
        g.initializer.extend(branch.initializer)
        g.sparse_initializer.extend(branch.sparse_initializer)
        made = {o for b in branch.node for o in b.output if o}
        rename = {vo.name: o for vo, o in zip(branch.output, n.output) if o and vo.name in made}
        for b in branch.node:
            c = onnx.NodeProto()
            c.CopyFrom(b)
            c.input[:] = [rename.get(t, t) for t in b.input]
            c.output[:] = [rename.get(t, t) for t in b.output]
            nodes.append(c)
        nodes += [onnx.helper.make_node("Identity", [vo.name], [o], name=f"{o}_from_branch")
                  for vo, o in zip(branch.output, n.output) if o and vo.name not in made]
    del g.node[:]
    g.node.extend(nodes)
    return m
