"""The cost of control flow: an If as the branch its condition selects
(else its heavier branch), a Loop as its body times its trip count, a Scan
as its body times its scan length; each body extracted as a model of its
own (:mod:`perfseer_rt.graph.subgraphs`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from perfseer_rt.graph.limits import Deadline
from perfseer_rt.graph.ops import NodeCost
from perfseer_rt.graph.propagate import TypedShape
from perfseer_rt.graph.subgraphs import (
    MAX_SUBGRAPH_DEPTH,
    const_int,
    constant_of,
    if_condition,
    loop_body_values,
)
from perfseer_rt.graph.switches import switch_shape

#: The note when a dominant If was replaced by a branch ({why}: "its heavier
#: branch", or "the branch its condition selects").
DOMINANT_IF_WARNING = (
    "If node {label} does {share:.0%} of the model's work (a merged decoder's cache switch, "
    "say): it is extracted as {why} ({branch}), so the prediction is for a run that takes "
    "that branch{hint}")
#: Added to it where the heavier branch was taken and the condition is a
#: switch input (:mod:`perfseer_rt.graph.switches`) the caller can set.
SWITCH_HINT = ("; its condition is the input {name!r}: --dim {name}=1 takes then_branch, "
               "--dim {name}=0 else_branch")
#: A dominant If's branch taken: (branch, FLOPs, label, why, hint) by first output.
Chosen = dict[str, tuple[str, float, str, str, str]]

#: The FLOPs of a subgraph extracted as a model of its own (body, actual
#: input types, outer model, outer shapes, node cap, deadline, depth, known
#: values of its inputs), None where it cannot be extracted.
SubgraphFlops = Callable[[onnx.GraphProto, dict[str, TypedShape | None], onnx.ModelProto,
                          dict[str, TypedShape], int, Deadline, int,
                          dict[str, np.ndarray | onnx.NodeProto] | None], float | None]


def control_flow_cost(node: onnx.NodeProto, proto: onnx.ModelProto,
                       shapes: dict[str, TypedShape], max_nodes: int, deadline: Deadline,
                       depth: int, known_trips: dict[tuple[str, ...], int] | None = None,
                       chosen: Chosen | None = None,
                       taken: dict[str, str] | None = None,
                       producers: dict[str, onnx.NodeProto] | None = None, *,
                       subgraph_flops: SubgraphFlops) -> tuple[NodeCost, bool, str | None]:
    """Cost of If (the branch its condition selects where ``taken`` knows it
    by the If's first output, else the heavier branch), Loop (body x trip
    count: a constant, or one computed from shapes, ``known_trips`` by the
    Loop's outputs; 1 assumed when unknown) and Scan (body x scan length).
    ``producers`` maps ``proto``'s tensors to their nodes (built here when
    not given); ``subgraph_flops`` extracts a body's FLOPs. Returns ``(cost, ruled, warning or None)``; a body that
    cannot be costed gives the generic cost and a warning."""
    label = f"{node.op_type} node {node.name or node.output[0]!r}"
    bodies = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
    if depth >= MAX_SUBGRAPH_DEPTH:
        return NodeCost(0.0), False, f"{label}: subgraphs nested deeper than " \
            f"{MAX_SUBGRAPH_DEPTH} are not costed"
    branch = (taken or {}).get(node.output[0]) if node.op_type == "If" and node.output else None
    if node.op_type == "If" and branch is None and node.input and node.input[0]:
        constant = constant_of(proto, node.input[0])  # a switch set by the caller, say
        known = if_condition(node.input[0], {node.input[0]: constant}) if constant is not None \
            else None
        branch = None if known is None else "then_branch" if known else "else_branch"
    if branch is not None and branch in bodies:
        flops = subgraph_flops(bodies[branch], {}, proto, shapes, max_nodes, deadline, depth, None)
        if flops is None:
            return NodeCost(0.0), False, f"{label}: its {branch} could not be costed"
        if chosen is not None:
            chosen[node.output[0]] = (branch, float(flops), repr(node.name or node.output[0]),
                                      "the branch its condition selects", "")
        return NodeCost(flops), True, None
    if node.op_type == "If":
        found = {k: subgraph_flops(g, {}, proto, shapes, max_nodes, deadline, depth, None)
                 for k, g in bodies.items() if k in ("then_branch", "else_branch")}
        costs = {k: v for k, v in found.items() if v is not None}
        if not costs:
            return NodeCost(0.0), False, f"{label}: neither branch could be costed"
        heavy = max(costs, key=costs.__getitem__)
        # a branch whose shapes do not follow at these input shapes would fail to run on them
        # (silero-vad's 8 kHz branch given a 16 kHz frame): the other is the one that runs
        only = len(costs) < len(found)
        if chosen is not None and node.output and node.output[0]:
            cond = node.input[0] if node.input else ""
            switch = next((vi for vi in proto.graph.input if vi.name == cond
                           and switch_shape(vi) is not None), None)
            hint = SWITCH_HINT.format(name=cond) if switch is not None else ""
            chosen[node.output[0]] = (heavy, float(costs[heavy]), repr(node.name or node.output[0]),
                                      "the only branch whose shapes follow from these input "
                                      "shapes" if only else "its heavier branch", hint)
        if only:
            other = next(k for k in found if k not in costs)
            return NodeCost(costs[heavy]), True, (
                f"{label}: its {other} could not be costed at these input shapes (a branch whose "
                f"shapes do not follow from them cannot run on them); costed as its {heavy} "
                f"({costs[heavy]:.3g} FLOPs)")
        return NodeCost(costs[heavy]), True, (
            f"{label}: costed as its heavier branch ({heavy}, {costs[heavy]:.3g} FLOPs)")
    body = bodies.get("body")
    if body is None:
        return NodeCost(0.0), False, f"{label}: no body subgraph"
    formal = [vi.name for vi in body.input]
    if node.op_type == "Loop":
        actual = {f: shapes.get(a) for f, a in zip(formal[2:], node.input[2:]) if a}
        actual.update({formal[0]: (7, ()), formal[1]: (9, ())} if len(formal) > 1 else {})
        trips = const_int(proto, node.input[0]) if node.input and node.input[0] else None
        if trips is None and known_trips:
            trips = known_trips.get(tuple(node.output))
        if producers is None:
            producers = {o: n for n in proto.graph.node for o in n.output}
        given = loop_body_values(body, node, producers, trips)
    else:  # Scan: state variables, then scan inputs sliced along axis 0
        given = {}
        n_scan = next((a.i for a in node.attribute if a.name == "num_scan_inputs"), 0)
        n_state = len(node.input) - n_scan
        actual = {f: shapes.get(a) for f, a in zip(formal[:n_state], node.input[:n_state])}
        trips = None
        for f, a in zip(formal[n_state:], node.input[n_state:]):
            typed = shapes.get(a)
            if typed and typed[1]:
                actual[f] = (typed[0], typed[1][1:])
                trips = typed[1][0]
    flops = subgraph_flops(body, actual, proto, shapes, max_nodes, deadline, depth, given)
    if flops is None:
        return NodeCost(0.0), False, f"{label}: its body could not be costed"
    if trips is None:
        return NodeCost(flops), True, (f"{label}: trip count unknown before run time; "
                                       "assumed 1 iteration of its body")
    return NodeCost(flops * trips), True, None
