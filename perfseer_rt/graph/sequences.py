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

Where every item's shape is known (:func:`sequence_items`: a list built
from tensors of known shapes, as torch's exporter writes ``[cls, x]``), the
readers use them: ``SequenceAt`` at a known position gives that item's
shape and ``ConcatFromSequence`` the sum of the items along its axis, not
the length times the largest (a class token and 25,088 patch tokens
concatenate to 25,089 tokens, not 50,176).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from perfseer_rt.graph.nodes import Attrs

Shape = tuple[int, ...]
TypedShape = tuple[int, Shape]  # (elem_type, shape); a sequence: (elem_type, (L, *S))
#: The shape of each item of a sequence, in order.
Items = list[Shape]
#: A sequence input's items by position (None: not known, or not a sequence).
ItemsOf = Callable[[int], "Items | None"]
INT64 = 7


def _no_items(pos: int) -> Items | None:
    return None

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


def _position(int_values: Callable[[int], list[int] | None], pos: int, present: bool,
              length: int, default: int) -> int | None:
    """A position input's value made non-negative (``default`` where the
    input is absent; None: unknown or out of ``[-length, length)``, or
    ``length`` itself where ``default`` is)."""
    if not present:
        return default
    found = int_values(pos)
    if not found or len(found) != 1:
        return None
    at = found[0] + length if found[0] < 0 else found[0]
    return at if 0 <= at < length or at == default == length else None


def sequence_items(op: str, ins: Sequence[TypedShape | None], attrs: Attrs,
                   int_values: Callable[[int], list[int] | None], items_of: ItemsOf
                   ) -> Items | None:
    """The shape of every item of a producer's output sequence, where each
    is known (None otherwise); arguments as :func:`sequence_shapes`."""
    if op == "SequenceEmpty":
        return []
    if op == "SequenceConstruct":
        return [t[1] for t in ins if t is not None] if ins and all(ins) else None
    first = ins[0] if ins else None
    if first is None:
        return None
    if op == "SplitToSequence":
        shape = first[1]
        axis = _axis(attrs.get("axis", 0), len(shape))
        if axis is None:
            return None
        dim = shape[axis]
        if len(ins) < 2 or ins[1] is None:
            keep = attrs.get("keepdims", 1)
            return [shape[:axis] + ((1,) if keep else ()) + shape[axis + 1:]] * dim
        split = int_values(1)
        if not split or min(split) < 0:
            return None
        if not ins[1][1]:  # chunks of one size, the last one shorter
            if split[0] < 1:
                return None
            sizes = [split[0]] * (dim // split[0]) + ([dim % split[0]] if dim % split[0] else [])
        elif sum(split) != dim:
            return None
        else:
            sizes = split
        return [shape[:axis] + (n,) + shape[axis + 1:] for n in sizes]
    base = items_of(0)
    if base is None:
        return None
    if op == "SequenceInsert":
        tensor = ins[1] if len(ins) > 1 else None
        at = _position(int_values, 2, len(ins) > 2 and ins[2] is not None, len(base), len(base))
        return None if tensor is None or at is None else [*base[:at], tensor[1], *base[at:]]
    if op == "SequenceErase":
        at = _position(int_values, 1, len(ins) > 1 and ins[1] is not None, len(base),
                       len(base) - 1)
        return None if at is None or not base else [*base[:at], *base[at + 1:]]
    return None


def sequence_shapes(op: str, ins: Sequence[TypedShape | None], attrs: Attrs, n_out: int,
                    int_values: Callable[[int], list[int] | None],
                    items_of: ItemsOf = _no_items) -> list[TypedShape] | None:
    """The output types of a sequence op, sequences as ``(elem, (L, *S))``.

    Args:
        op: a member of :data:`PRODUCERS` or :data:`READERS`.
        ins: each input's type (sequences as above), None where absent.
        attrs: the node's attributes.
        n_out: its number of outputs.
        int_values: the integer values of an input by position (None:
            absent or not known before run time).
        items_of: a sequence input's item shapes by position, where known
            (:func:`sequence_items`).

    Returns:
        The output types, or None where the inputs do not give them.
    """
    first = ins[0] if ins else None
    items = items_of(0) if op in READERS else None
    if items:
        exact = _read_items(op, first, items, attrs, int_values, len(ins) > 1 and ins[1] is not None)
        if exact is not None:
            return exact
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


def _read_items(op: str, first: TypedShape | None, items: Items, attrs: Attrs,
                int_values: Callable[[int], list[int] | None], has_position: bool
                ) -> list[TypedShape] | None:
    """A reader's output type from the exact shapes of its sequence's items
    (None: the items do not decide it; the (L, *S) rules then apply)."""
    if first is None:
        return None
    elem = first[0]
    if op == "SequenceAt":
        at = _position(int_values, 1, has_position, len(items), -1)
        return None if at is None or at < 0 else [(elem, items[at])]
    if op == "ConcatFromSequence":
        rank = len(items[0])
        if any(len(s) != rank for s in items):
            return None
        if attrs.get("new_axis", 0):
            axis = _axis(attrs.get("axis"), rank + 1)
            if axis is None or any(s != items[0] for s in items):
                return None
            return [(elem, (*items[0][:axis], len(items), *items[0][axis:]))]
        axis = _axis(attrs.get("axis"), rank)
        largest = _largest(items)
        if axis is None or largest is None:
            return None
        return [(elem, (*largest[:axis], sum(s[axis] for s in items), *largest[axis + 1:]))]
    return None
