"""Global features computed from a PerfGraph's node and edge arrays
(:data:`perfseer_rt.graph.layout.STRUCTURE_COLUMNS`, layout ``psrt-2``).

They describe what the runtime does with the model rather than how much it
computes, for the two places where the ``psrt-1`` globals fell short on real
models (CPU, onnxruntime):

* where the weights go. The session-creation peak per weight byte ranges from
  ~1.2x (MatMul weights of transformers) to over 3x (small 3x3 convolutions
  whose channels do not fit the CPU's blocked layout): onnxruntime reorders
  and pre-packs convolution weights, and how it does so depends on the
  kernel and channel alignment. ``weight_conv1x1``, ``weight_conv_kxk``,
  ``weight_conv_grouped``, ``weight_matmul`` (MatMul, Gemm) and
  ``weight_other`` split the unique weight bytes (``weight_total``) by the
  operator that reads them (a weight read by several operators is shared out
  in proportion to their reads); ``weight_conv_unaligned`` is the part read by
  ungrouped convolutions whose input or output channels are not a multiple of
  16. Bytes.
* how much activation memory is alive at once. ``act_live_peak`` is the
  largest sum of node-output bytes alive at one time when the nodes run in
  their stored (topological) order: an output lives from its node to its last
  reader, outputs nobody reads live to the end, and view-like operators
  (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout) alias their input
  instead of allocating. ``act_total`` is the bytes of all node outputs.
  Bytes. ``flops_conv_grouped`` and ``flops_matmul`` are the FLOPs of grouped
  convolutions and of MatMul/Gemm, whose CPU kernels run at very different
  rates per FLOP.

Everything here is a function of ``(x, edge_index, edge_attr)`` and
``weight_total``, so graphs stored in the older layout are upgraded exactly
(:func:`upgrade_globals`).
"""

from __future__ import annotations

import numpy as np

from perfseer_rt.graph import layout

_N = layout.column_index(layout.NODE_COLUMNS)
_E = layout.column_index(layout.EDGE_COLUMNS)
#: Operators whose output is a view of their first input in onnxruntime.
VIEW_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")
_VIEW_COLS = [_N[f"op_{op}"] for op in VIEW_OPS]
#: Channel multiple of the CPU's blocked convolution layout (AVX-512: 16 floats).
CHANNEL_BLOCK = 16


def structure_globals(x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray,
                      weight_total: float) -> np.ndarray:
    """The :data:`~perfseer_rt.graph.layout.STRUCTURE_COLUMNS` of one graph,
    ``float64[len(STRUCTURE_COLUMNS)]`` (definitions in the module doc)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1, len(layout.NODE_COLUMNS))
    ei = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    ea = np.asarray(edge_attr, dtype=np.float64).reshape(-1, len(layout.EDGE_COLUMNS))
    w, flops = x[:, _N["weight"]], x[:, _N["flops"]]
    conv = x[:, _N["op_Conv"]] > 0
    grouped = conv & (x[:, _N["groups"]] > 1)
    dense = conv & ~grouped
    k1 = dense & (x[:, _N["kernel_h"]] <= 1) & (x[:, _N["kernel_w"]] <= 1)
    matmul = (x[:, _N["op_MatMul"]] > 0) | (x[:, _N["op_Gemm"]] > 0)
    unaligned = dense & ((x[:, _N["in_channels"]] % CHANNEL_BLOCK != 0)
                         | (x[:, _N["out_channels"]] % CHANNEL_BLOCK != 0))
    reads = w.sum()
    share = float(weight_total) / reads if reads > 0 else 0.0
    live, total = activation_bytes(x, ei, ea)
    vals = {"weight_conv1x1": w[k1].sum() * share, "weight_conv_kxk": w[dense & ~k1].sum() * share,
            "weight_conv_grouped": w[grouped].sum() * share, "weight_matmul": w[matmul].sum() * share,
            "weight_other": w[~conv & ~matmul].sum() * share,
            "weight_conv_unaligned": w[unaligned].sum() * share,
            "flops_conv_grouped": flops[grouped].sum(), "flops_matmul": flops[matmul].sum(),
            "act_live_peak": live, "act_total": total}
    return np.array([float(vals[c]) for c in layout.STRUCTURE_COLUMNS], dtype=np.float64)


def activation_bytes(x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray) -> tuple[float, float]:
    """``(act_live_peak, act_total)`` in bytes (module doc). An output's bytes
    are the node's ``out_elems`` times the element size on its outgoing edges
    (4 bytes when nobody reads it)."""
    n = len(x)
    if n == 0:
        return 0.0, 0.0
    src, dst = edge_index[0], edge_index[1]
    itemsize = np.full(n, 4.0)
    itemsize[src] = edge_attr[:, _E["dtype_bytes"]]
    size = x[:, _N["out_elems"]] * itemsize
    last = np.full(n, n, dtype=np.int64)  # read by nobody: alive to the end
    if len(src):
        reader = np.full(n, -1, dtype=np.int64)
        np.maximum.at(reader, src, dst)
        last = np.where(reader >= 0, reader, n)
    view = x[:, _VIEW_COLS].sum(axis=1) > 0
    if view.any() and len(src):
        first_in = np.full(n, n, dtype=np.int64)
        np.minimum.at(first_in, dst, src)  # the earliest producer a node reads
        first_in[first_in == n] = -1
        owner = np.arange(n)
        for i in np.flatnonzero(view & (first_in >= 0)):  # in node order: chains resolve
            o = owner[first_in[i]]
            owner[i] = o
            last[o] = max(last[o], last[i])
        size = np.where(view & (first_in >= 0), 0.0, size)
    change = np.zeros(n + 2)
    np.add.at(change, np.arange(n), size)
    np.add.at(change, np.minimum(last, n) + 1, -size)
    return float(np.cumsum(change)[:n + 1].max()), float(size.sum())


def upgrade_globals(version: str, x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray,
                    u: np.ndarray) -> np.ndarray:
    """Globals ``u`` of a graph stored in layout ``version`` in the current
    layout (``u`` unchanged when it is current).

    Raises:
        ValueError: a layout this perfseer-rt cannot upgrade, or ``u`` of the
            wrong length for it.
    """
    columns = layout.GLOBAL_COLUMNS_OF.get(version)
    u = np.asarray(u).reshape(-1)
    if columns is None or len(u) != len(columns):
        raise ValueError(f"globals of layout {version!r} with {len(u)} columns cannot be upgraded "
                         f"to {layout.FEATURE_VERSION!r}")
    if version == layout.FEATURE_VERSION:
        return u
    if columns != layout.BASE_GLOBAL_COLUMNS:
        raise ValueError(f"no upgrade from layout {version!r}")
    extra = structure_globals(x, edge_index, edge_attr, float(u[columns.index("weight_total")]))
    return np.concatenate([u, extra.astype(u.dtype)])
