"""Nodes in an order where every tensor is produced before it is read.

ONNX asks for topologically sorted nodes and every exporter writes them so,
but onnxruntime sorts a graph itself and runs one whose nodes are out of
order (hand-edited or merged models); extraction's passes read nodes in
file order, so such a graph is sorted first. A cycle cannot run anywhere
and is an error naming a node on it.
"""

from __future__ import annotations

import heapq

import onnx

from perfseer_rt.errors import GraphError
from perfseer_rt.graph.nodes import INS, NAME, OP, OUTS, Row


def topological_order(table: list[Row], name: str) -> list[int] | None:
    """None when ``table``'s nodes are in order; else node positions in an
    order that is (of the nodes ready to run, the earliest in the file first).
    A tensor produced by no node (a graph input, a weight, an outer-scope
    name in a subgraph) constrains nothing; of two producers of one tensor
    the first counts.

    Raises:
        GraphError: the graph has a cycle.
    """
    producer: dict[str, int] = {}
    for i in range(len(table) - 1, -1, -1):  # the first producer is the one kept
        for t in table[i][OUTS]:
            producer[t] = i
    producer.pop("", None)  # an omitted optional output
    get = producer.get
    if not any(get(t, -1) >= i for i, row in enumerate(table) for t in row[INS]):
        return None
    needs = [{p for t in row[INS] if (p := get(t)) is not None} for row in table]
    users: list[list[int]] = [[] for _ in table]
    for i, deps in enumerate(needs):
        for p in deps:
            users[p].append(i)
    waiting = [len(d) for d in needs]
    ready = [i for i, w in enumerate(waiting) if w == 0]  # a heap (sorted is one)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in users[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    if len(order) < len(table):
        stuck = next(i for i, w in enumerate(waiting) if w)
        row = table[stuck]
        raise GraphError(f"{name}: the graph has a cycle (nodes that wait on each other's "
                         f"outputs, the first {row[NAME] or row[OP]!r}); such a model cannot run")
    return order


def reordered(proto: onnx.ModelProto, order: list[int]) -> onnx.ModelProto:
    """A copy of ``proto`` whose top-level nodes follow ``order``."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    nodes = proto.graph.node
    del out.graph.node[:]
    out.graph.node.extend(nodes[i] for i in order)  # copies of the caller's nodes
    return out
