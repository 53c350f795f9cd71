"""Peak GPU memory of inference, as an estimate in named parts (MiB).

* ``weights``: exact: every initializer once (shared ones counted once),
  from their dims, so structure-only models work.
* ``activations``: the largest live set of the graph's schedule: nodes run
  in the ONNX (topological) order; a node's outputs live from that node
  until their last consumer (to the end when nothing consumes them: graph
  outputs); graph inputs live throughout.
* ``allocator``: onnxruntime's BFC arena grows by doubling
  (``kNextPowerOfTwo``, its default), so the activations' arena is taken as
  their peak rounded up to the next power of two MiB; the part is that
  rounding.
* ``workspace``: cuBLAS workspace plus, with convolutions, the largest
  implicit-GEMM (im2col) buffer of any Conv node as cuDNN's workspace.
* ``cuda_context``: CUDA context plus loaded cuBLAS/cuDNN kernels, a per
  device figure in the device manifest (an assumption, not measured by us).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from perfseer_rt.graph.ops import dtype_itemsize
from perfseer_rt.graph.perfgraph import PerfGraph

MIB = 1024.0 ** 2


def weight_bytes(proto: onnx.ModelProto | None, graph: PerfGraph) -> tuple[float, bool]:
    """Bytes of the weights, and whether the figure is exact (from the model's
    initializers) or an upper bound (from the PerfGraph, shared weights
    counted per use)."""
    if proto is None:
        return float(graph.node_column("weight").sum()), False
    seen: set[str] = set()
    total = 0
    graphs = [proto.graph]  # and every subgraph: onnxruntime loads the weights of both
    while graphs:           # branches of an If, of Loop bodies, ...
        g = graphs.pop()
        for t in list(g.initializer) + [s.values for s in g.sparse_initializer]:
            if t.name in seen:
                continue
            seen.add(t.name)
            total += math.prod(t.dims) * dtype_itemsize(t.data_type)
        for node in g.node:
            for a in node.attribute:
                if node.op_type == "Constant" and a.name == "value" and a.t is not None:
                    total += math.prod(a.t.dims) * dtype_itemsize(a.t.data_type)  # weights too
                graphs += [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
    return float(total), True


def peak_activation_bytes(graph: PerfGraph, itemsize_scale: float = 1.0) -> float:
    """Largest live set (bytes) over the ONNX node order (see module doc)."""
    n = graph.num_nodes
    out_elems = graph.node_column("out_elems")
    itemsize = np.full(n, 4.0)
    last_use = np.full(n, n, dtype=np.int64)
    if graph.num_edges:
        src, dst = graph.edge_index
        dtype_b = graph.edge_column("dtype_bytes")
        itemsize[src] = dtype_b
        last = np.full(n, -1, dtype=np.int64)
        np.maximum.at(last, src, dst)
        last_use = np.where(last >= 0, last, n)
    size = out_elems * itemsize * itemsize_scale
    inputs = sum(math.prod(s) for s in graph.input_shapes.values()) * 4.0 * itemsize_scale
    # live(k) = sum of size[j] for j <= k <= last_use[j]: a difference array.
    delta = np.zeros(n + 2)
    np.add.at(delta, np.arange(n), size)
    np.add.at(delta, np.minimum(last_use, n) + 1, -size)
    live = np.cumsum(delta)[:n]
    return float(live.max() if n else 0.0) + float(inputs)


def workspace_bytes(graph: PerfGraph, cublas_mib: float) -> float:
    conv = np.array([op == "Conv" for op in graph.node_ops])
    im2col = 0.0
    if conv.any():
        c = graph.node_column
        per = (c("in_channels") * np.maximum(c("kernel_h"), 1) * np.maximum(c("kernel_w"), 1)
               * c("out_elems") / np.maximum(c("out_channels"), 1) * 4.0)
        im2col = float(per[conv].max())
    return cublas_mib * MIB + im2col


def estimate(graph: PerfGraph, proto: onnx.ModelProto | None, overhead: dict[str, Any],
             itemsize_scale: float = 1.0) -> tuple[float, dict[str, float], bool]:
    """Total MiB, its parts in MiB, and whether the weights are exact.

    ``overhead``: the device manifest's ``memory_overhead`` block
    (``cuda_context_mib``, ``cublas_workspace_mib``).
    """
    w, exact = weight_bytes(proto, graph)
    act = peak_activation_bytes(graph, itemsize_scale)
    act_mib = act / MIB
    arena = 2.0 ** math.ceil(math.log2(act_mib)) if act_mib > 1.0 else 1.0
    parts = {"weights": w * itemsize_scale / MIB, "activations": act_mib,
             "allocator": arena - act_mib,
             "workspace": workspace_bytes(graph, overhead["cublas_workspace_mib"]) / MIB,
             "cuda_context": float(overhead["cuda_context_mib"])}
    parts = {k: round(v, 2) for k, v in parts.items()}
    return round(sum(parts.values()), 2), parts, exact
