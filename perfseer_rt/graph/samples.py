"""Inputs that hold one sample, not a batch.

torchvision's detectors take a list of images, and their export takes one
image, ``[3, H, W]``: the model normalises it and adds the batch axis itself
(``Unsqueeze`` at axis 0). That input's first dim is its channels, not a
batch: the model's batch is 1 (not 3), and it runs one image at a time. An
input is taken as one sample when it has a static first dim and rank 2 or 3
(one image, one sequence; a rank-4 input already has its batch axis) and,
through elementwise ops only (:data:`PER_ELEMENT`, within
:data:`SEARCH_NODES` nodes), it reaches an Unsqueeze at axis 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from perfseer_rt.graph.nodes import Row

#: Ops an input passes through before its batch axis is added (a
#: normalisation: ``(image - mean) / std``).
PER_ELEMENT = frozenset({"Sub", "Div", "Mul", "Add", "Cast", "Identity", "Clip", "Relu", "Neg",
                         "Abs", "Sqrt", "Reciprocal"})
#: Nodes searched from each input at the most.
SEARCH_NODES = 32


def sample_inputs(table: Sequence[Row], names: Iterable[str],
                  int_values: Callable[[str], list[int] | None]) -> set[str]:
    """The inputs among ``names`` that hold one sample (module docstring).

    Args:
        table: the graph's node table.
        names: candidate inputs (static first dim, rank 2 or 3).
        int_values: the integer values of a constant tensor by name (None:
            not a constant), for Unsqueeze's axes input (opset 13 on).
    """
    names = list(names)
    if not names:
        return set()
    readers: dict[str, list[Row]] = {}
    for row in table:
        for t in row[3]:
            if t:
                readers.setdefault(t, []).append(row)
    found = set()
    for name in names:
        todo, seen = [name], 0
        while todo and seen < SEARCH_NODES:
            t = todo.pop()
            for row in readers.get(t, ()):
                seen += 1
                op, ins, outs, attrs = row[0], row[3], row[4], row[5]
                if row[2] not in ("", "ai.onnx"):
                    continue
                if op == "Unsqueeze" and ins and ins[0] == t:
                    axes = attrs.get("axes") if "axes" in attrs else (
                        int_values(ins[1]) if len(ins) > 1 and ins[1] else None)
                    if axes == [0]:
                        found.add(name)
                        todo = []
                        break
                elif op in PER_ELEMENT:
                    todo.extend(o for o in outs if o)
    return found
