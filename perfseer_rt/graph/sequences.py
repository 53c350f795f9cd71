"""Sequence values (SplitToSequence, SequenceAt, ConcatFromSequence...).

ONNX's sequence type holds a list of tensors, which scripted exports write
for Python lists (``torch.split`` kept as a list, a list built in a loop and
stacked). A PerfGraph has tensors only, so a sequence of ``L`` tensors of
shape ``S`` is carried as one tensor of shape ``(L, *S)``: the bytes it
holds, which is what its edges and its consumers' features need. Where the
elements differ in shape, each dim takes its largest (an upper bound, as
for :mod:`perfseer_rt.graph.data_dependent`). onnx's inference does not
give these shapes (it types sequences without a length), so the rules here
do, from the producers' input shapes and constant inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from perfseer_rt.graph.nodes import Attrs

Shape = tuple[int, ...]
TypedShape = tuple[int, Shape]  # (elem_type, shape); a sequence: (elem_type, (L, *S))
INT64 = 7

#: Ops whose outputs are sequences.
PRODUCERS = frozenset({"SplitToSequence", "SequenceConstruct", "SequenceEmpty", "SequenceInsert",
                       "SequenceErase"})
#: Ops that read a sequence (their first input).
READERS = frozenset({"SequenceAt", "SequenceLength", "ConcatFromSequence", "SequenceInsert",
                     "SequenceErase"})


def _axis(value: object, rank: int) -> int | None:
    if type(value) is not int or not -rank <= value < rank:
        return None
    return value % rank


def _largest(shapes: Sequence[Shape]) -> Shape | None:
    """Dim by dim the largest of shapes of one rank (None: ranks differ)."""
    if not shapes or any(len(s) != len(shapes[0]) for s in shapes):
        return None
    return tuple(map(max, *shapes)) if len(shapes) > 1 else shapes[0]


def sequence_shapes(op: str, ins: Sequence[TypedShape | None], attrs: Attrs, n_out: int,
                    int_values: Callable[[int], list[int] | None]) -> list[TypedShape] | None:
    """The output types of a sequence op, sequences as ``(elem, (L, *S))``.

    Args:
        op: a member of :data:`PRODUCERS` or :data:`READERS`.
        ins: each input's type (sequences as above), None where absent.
        attrs: the node's attributes.
        n_out: its number of outputs.
        int_values: the integer values of an input by position (None:
            absent or not known before run time).

    Returns:
        The output types, or None where the inputs do not give them.
    """
    first = ins[0] if ins else None
    if op == "SequenceEmpty":
        dtype = attrs.get("dtype", 1)
        return [(dtype if type(dtype) is int else 1, (0,))]
    if op == "SequenceConstruct":
        if not ins or any(t is None for t in ins):
            return None
        shape = _largest([t[1] for t in ins if t is not None])
        return None if shape is None or first is None else [(first[0], (len(ins), *shape))]
    if first is None:
        return None
    elem, shape = first
    if op == "SplitToSequence":
        axis = _axis(attrs.get("axis", 0), len(shape))
        if axis is None:
            return None
        dim = shape[axis]
        split_type = ins[1] if len(ins) > 1 else None
        if split_type is None:  # chunks of 1, the axis kept or dropped
            keep = attrs.get("keepdims", 1)
            piece = shape[:axis] + ((1,) if keep else ()) + shape[axis + 1:]
            return [(elem, (dim, *piece))]
        split = int_values(1)
        if not split or min(split) < 0:
            return None  # split sizes known only at run time
        if not split_type[1]:  # a scalar: chunks of that size
            if split[0] < 1:
                return None
            count, width = -(-dim // split[0]), min(split[0], dim)
        else:
            count, width = len(split), max(split)
        return [(elem, (count, *shape[:axis], width, *shape[axis + 1:]))]
    if not shape:
        return None
    length, item = shape[0], shape[1:]
    if op == "SequenceLength":
        return [(INT64, ())]
    if op == "SequenceAt":
        return [(elem, item)]
    if op == "SequenceErase":
        return [(elem, (max(length - 1, 0), *item))]
    if op == "SequenceInsert":
        tensor = ins[1] if len(ins) > 1 else None
        if tensor is None:
            return None
        merged = tensor[1] if length == 0 else _largest([item, tensor[1]])
        return None if merged is None else [(elem, (length + 1, *merged))]
    if op == "ConcatFromSequence":
        new_axis = attrs.get("new_axis", 0)
        rank = len(item) + (1 if new_axis else 0)
        axis = _axis(attrs.get("axis"), rank)
        if axis is None:
            return None
        if new_axis:
            return [(elem, (*item[:axis], length, *item[axis:]))]
        return [(elem, (*item[:axis], length * item[axis], *item[axis + 1:]))]
    return None
