"""Named input dims that a model fixes itself, for when they are not given.

onnxruntime-genai's model builder leaves two KV-cache dims of its models
symbolic although the model determines them:

* the cache's last dim (``kv_cache_dim``), so that one file serves a
  quantized cache too: unquantized, it is the head size of the
  GroupQueryAttention node that reads the cache, which the node's query or
  key gives;
* the cache length of a sliding-window layer (Gemma2's
  ``past_sliding_length``), whose past and present buffers are window-sized
  (the node's ``sliding_window_cache`` attribute): it is the node's
  ``local_window_size`` (onnxruntime refuses a smaller cache).

A dim is implied only where every node that reads it agrees; a prediction
that uses one says so (:data:`IMPLIED_DIM_WARNING`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

import onnx

from perfseer_rt.graph.contrib import MS_DOMAIN, gqa_head_size
from perfseer_rt.graph.nodes import ATTRS, DOMAIN, INS, OP, Row
from perfseer_rt.graph.propagate import GiveUp, TypedShape

#: Why a dim was set, by kind.
HEAD_SIZE: Final = ("the head size of the model's GroupQueryAttention nodes that read it as their "
                    "KV cache's last dim (an unquantized cache)")
WINDOW: Final = ("the local_window_size of the GroupQueryAttention nodes whose sliding-window KV "
                 "cache it sizes (such a cache is allocated at the window; their attention is "
                 "counted over the whole window, an upper bound while fewer tokens are cached)")
#: The note on each implied dim.
IMPLIED_DIM_WARNING: Final = ("input dim {name!r} was not given: set to {size}, {why}; give "
                              "--dim {name}=N where the model is run otherwise")

Shapes = Callable[[dict[str, int]], dict[str, TypedShape] | None]


def _symbolic(d: onnx.TensorShapeProto.Dimension, given: dict[str, int]) -> str | None:
    return d.dim_param if not d.HasField("dim_value") and d.dim_param and \
        d.dim_param not in given else None


def implied_dims(table: Sequence[Row], input_dims: dict[str, Sequence[onnx.TensorShapeProto.Dimension]],
                 given: dict[str, int], shapes_with: Shapes) -> dict[str, tuple[int, str]]:
    """``{dim name: (size, why)}`` for the cache dims of GroupQueryAttention
    nodes not in ``given``. ``input_dims``: the dims of each graph input
    whose shape was not given whole; ``shapes_with(dims)``: the shapes the
    model's tensors take with these named dims added to the given ones
    (None where they cannot be found), asked once, with head-size dims at 1
    (the head size does not depend on them)."""
    heads: dict[str, list[Row]] = {}
    windows: dict[str, set[object]] = {}
    for row in table:
        if row[OP] != "GroupQueryAttention" or row[DOMAIN] != MS_DOMAIN:
            continue
        attrs = row[ATTRS]
        window = attrs.get("local_window_size") if attrs.get("sliding_window_cache") == 1 else None
        for t in row[INS][3:5]:  # past_key, past_value: [batch, kv heads, length, head]
            d = input_dims.get(t)
            if d is None or len(d) != 4:
                continue
            name = _symbolic(d[3], given)
            if name:
                heads.setdefault(name, []).append(row)
            name = _symbolic(d[2], given)
            if name and window is not None:
                windows.setdefault(name, set()).add(window)
    implied: dict[str, tuple[int, str]] = {}
    for name, sizes in windows.items():
        size = sizes.pop() if len(sizes) == 1 else None
        if type(size) is int and size > 0:
            implied[name] = (size, WINDOW)
    heads = {n: rows for n, rows in heads.items() if n not in implied}
    if not heads:
        return implied
    shapes = shapes_with({**{n: s for n, (s, _) in implied.items()}, **dict.fromkeys(heads, 1)})
    if shapes is None:
        return implied
    for name, rows in heads.items():
        found: set[int | None] = set()
        for row in rows:
            try:
                found.add(gqa_head_size([shapes.get(t) if t else None for t in row[INS]], row[ATTRS]))
            except GiveUp:  # attributes out of range
                found.add(None)
        head = found.pop() if len(found) == 1 else None
        if head is not None:
            implied[name] = (head, HEAD_SIZE)
    return implied
