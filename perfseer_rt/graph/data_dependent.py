"""Upper bounds for output sizes that depend on a tensor's values.

Some standard ops size their outputs by the data they read, not by their
input shapes: ``NonZero`` (one column per non-zero element),
``NonMaxSuppression`` (one row per kept box), ``TopK`` with a ``K`` computed
at run time, ``Unique`` and ``Compress``. Detection models are full of them
(torchvision's SSD: 180 ``NonZero`` and 90 ``TopK`` nodes in its
post-processing), and neither onnx's inference nor any static pass can know
their sizes. Extraction then assumes each such size at its **upper bound**
(every element non-zero, every box kept, ``K`` the whole axis, every value
distinct, every condition true), the largest the op can produce from its
input shapes, and says so in one warning: the prediction is for the worst
case the input shapes allow. The bound is the same for every engine that
extracts (onnx's inference with the rules below, see
:func:`perfseer_rt.graph.extract`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import onnx

from perfseer_rt.graph.nodes import Attrs

Shape = tuple[int, ...]
TypedShape = tuple[int, Shape]  # (elem_type, shape)
INT64 = 7

#: The standard ops whose output sizes can depend on their input values.
DATA_DEPENDENT_OPS = frozenset({"NonZero", "NonMaxSuppression", "TopK", "Unique", "Compress"})

#: The assumption each op's bound makes, as the warning states it.
ASSUMED = {
    "NonZero": "every element non-zero",
    "NonMaxSuppression": "every box kept, up to max_output_boxes_per_class",
    "TopK": "K = the whole axis",
    "Unique": "every value distinct",
    "Compress": "every condition true",
    "Loop": "an empty loop-carried tensor gains one row per iteration",
    "Split": "a Split of such a size takes the sizes it was traced with",
}

#: The warning when any size was assumed (ops: "3 NonZero, 1 TopK").
DATA_DEPENDENT_WARNING = (
    "the output sizes of {ops} node(s) depend on the data, not on the input shapes; each was "
    "assumed at its upper bound ({why}), so latency and memory are for the worst case the "
    "input shapes allow")


def _axis(attrs: Attrs, rank: int, default: int) -> int | None:
    """The ``axis`` attribute as a non-negative index (None: out of range)."""
    axis = attrs.get("axis", default)
    if type(axis) is not int or not -rank <= axis < rank:
        return None
    return axis % rank


def bound_shapes(op: str, ins: Sequence[TypedShape | None], attrs: Attrs, n_out: int,
                 int_value: Callable[[int], int | None]) -> list[TypedShape] | None:
    """The upper-bound output types of a data-dependent node.

    Args:
        op: a member of :data:`DATA_DEPENDENT_OPS`.
        ins: each input's (element type, static shape), None where absent or
            unknown.
        attrs: the node's attributes.
        n_out: its number of outputs.
        int_value: the value of a scalar integer input by position (None:
            absent or not known before run time).

    Returns:
        One (element type, shape) per output, or None where the inputs are
        not known well enough to bound it (or the node is malformed).
    """
    x = ins[0] if ins else None
    if x is None:
        return None
    elem, shape = x
    rank = len(shape)
    if op == "NonZero":
        return [(INT64, (rank, math.prod(shape)))]
    if op == "TopK":
        axis = _axis(attrs, rank, -1)
        if axis is None or n_out != 2:
            return None
        return [(elem, shape), (INT64, shape)]  # K <= the axis's length
    if op == "NonMaxSuppression":
        scores = ins[1] if len(ins) > 1 else None
        if scores is None or rank != 3 or len(scores[1]) != 3:
            return None
        batch, classes, boxes = scores[1]
        if boxes != shape[1] or batch != shape[0]:
            return None
        per_class = int_value(2) if len(ins) > 2 and ins[2] is not None else 0
        per_class = boxes if per_class is None else min(max(per_class, 0), boxes)
        return [(INT64, (batch * classes * per_class, 3))]
    if op == "Unique":
        if "axis" in attrs:
            axis = _axis(attrs, rank, 0)
            if axis is None:
                return None
            n = shape[axis]
            y = shape
        else:
            n = math.prod(shape)
            y = (n,)
        return [(elem, y), *[(INT64, (n,))] * (n_out - 1)][:n_out]
    if op == "Compress":
        cond = ins[1] if len(ins) > 1 else None
        if cond is None or len(cond[1]) != 1:
            return None
        kept = cond[1][0]
        if "axis" in attrs:
            axis = _axis(attrs, rank, 0)
            if axis is None:
                return None
            return [(elem, shape[:axis] + (min(kept, shape[axis]),) + shape[axis + 1:])]
        return [(elem, (min(kept, math.prod(shape)),))]
    return None


#: Ops a routing mask passes through between its OneHot and the NonZero that
#: lists the tokens routed to one expert (their first input is followed).
ROUTING_PASS_OPS = frozenset({"Cast", "Gather", "Squeeze", "Unsqueeze", "Transpose", "Reshape",
                              "Identity", "Slice", "Flatten", "Greater", "Equal", "Not"})
#: Producers :func:`routing_source` walks back through at most.
ROUTING_SEARCH_DEPTH = 16

#: The note when NonZero nodes were taken as a mixture-of-experts' routing.
ROUTING_WARNING = (
    "{nodes} NonZero node(s) list the tokens routed to one expert of a mixture-of-experts layer "
    "(a slice of a one-hot routing mask): the routed token slots were assumed spread evenly "
    "over the experts each layer loops over ({detail}), as load-balanced routing aims at; a "
    "skewed router sends more to some experts and costs more")


def routing_source(name: str, producers: Mapping[str, onnx.NodeProto]) -> onnx.NodeProto | None:
    """The OneHot node whose one-class slice tensor ``name`` is, following
    the first input of :data:`ROUTING_PASS_OPS` nodes (None: not found)."""
    for _ in range(ROUTING_SEARCH_DEPTH):
        node = producers.get(name)
        if node is None or not node.input:
            return None
        if node.op_type == "OneHot" and node.domain in ("", "ai.onnx"):
            return node
        if node.op_type not in ROUTING_PASS_OPS or node.domain not in ("", "ai.onnx"):
            return None
        name = node.input[0]
    return None


def routing_groups(nodes: Sequence[onnx.NodeProto], producers: Mapping[str, onnx.NodeProto]
                   ) -> dict[str, int]:
    """OneHot output -> the number of NonZero nodes that read one-class
    slices of it (the experts a traced MoE layer loops over)."""
    groups: dict[str, int] = {}
    for n in nodes:
        if n.op_type == "NonZero" and n.input and n.domain in ("", "ai.onnx"):
            src = routing_source(n.input[0], producers)
            if src is not None and src.output:
                groups[src.output[0]] = groups.get(src.output[0], 0) + 1
    return groups


def routed_count(mask: TypedShape | None, indices: TypedShape | None, one_hot: TypedShape | None,
                 experts: int) -> int | None:
    """Non-zeros of a one-class slice ``mask`` of a one-hot tensor of
    ``indices`` (its slots) when the slots spread evenly over ``experts``
    classes; None unless ``mask`` has one element per slot, the one-hot at
    least two classes and ``experts`` >= 2."""
    if mask is None or indices is None or one_hot is None or experts < 2:
        return None
    slots = math.prod(indices[1])
    if slots < 1 or math.prod(mask[1]) != slots or math.prod(one_hot[1]) < 2 * slots:
        return None
    return -(-slots // experts)


def routing_warning(routed: Mapping[str, tuple[int, int]]) -> str:
    """The note for the NonZero nodes taken as routing (first output ->
    (token slots, experts))."""
    kinds: dict[tuple[int, int], int] = {}
    for key in routed.values():
        kinds[key] = kinds.get(key, 0) + 1
    detail = "; ".join(f"{slots} slots over {experts} experts, {slots / experts:.4g} each"
                       for slots, experts in sorted(kinds))
    return ROUTING_WARNING.format(nodes=len(routed), detail=detail)


def warning(counts: dict[str, int]) -> str:
    """The one warning for the data-dependent sizes assumed (op -> nodes)."""
    ops = ", ".join(f"{n} {op}" for op, n in sorted(counts.items()))
    why = "; ".join(f"{op}: {ASSUMED[op]}" for op in sorted(counts))
    return DATA_DEPENDENT_WARNING.format(ops=ops, why=why)
