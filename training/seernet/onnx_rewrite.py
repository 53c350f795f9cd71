"""Post-export rewrite of a SeerNet ONNX file for onnxruntime's CPU kernels.

torch lowers ``Tensor.scatter_add`` / ``scatter_reduce`` along dim 0 to
``ScatterElements(data, Expand(index[K, 1], [K, C]), src, axis=0)``.
onnxruntime runs that element by element (about 25 ns per element: 85 % of a
batched NAS-Bench-201 prediction). Scattering whole rows is the same
computation, and ``ScatterND(data, index[K, 1], src, reduction=...)`` does it
row by row (about 20x faster here). The rewrite is exact: same reduction, same
order of updates per row, when run on one intra-op thread. onnxruntime's
ScatterND reductions are not thread-safe (several threads update one row
without atomics: run-to-run different sums, onnxruntime issue #18048), so the
predictor must run with ``intra_op_num_threads=1``; ``perfseer_rt.predict``
always does, and the manifest says so (``session``).

Usage on already exported files (parity against the original is checked on
random graphs)::

    python -m training.seernet.onnx_rewrite exported_models/*/*.onnx
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def scatter_rows(model: onnx.ModelProto) -> int:
    """Replace every row scatter ``ScatterElements(axis=0)`` whose indices are
    an ``Expand`` of a ``[K, 1]`` tensor with ``ScatterND``; drop nodes left
    unused. Returns the number of nodes replaced. Modifies ``model`` in place."""
    graph = model.graph
    producer = {out: n for n in graph.node for out in n.output}
    consts = _constants(graph)
    replaced = 0
    new_nodes = []
    for node in graph.node:
        expand = producer.get(node.input[1]) if node.op_type == "ScatterElements" else None
        reshape = producer.get(expand.input[0]) if expand is not None and expand.op_type == "Expand" else None
        if (node.op_type != "ScatterElements" or _attr(node, "axis", 0) != 0 or expand is None
                or expand.op_type != "Expand" or not _is_column(consts, reshape)):
            new_nodes.append(node)
            continue
        reduction = _attr(node, "reduction", b"none")
        reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
        if reduction == "none":  # duplicate indices would be undefined for ScatterND
            new_nodes.append(node)
            continue
        new_nodes.append(helper.make_node("ScatterND", [node.input[0], expand.input[0], node.input[2]],
                                          list(node.output), name=f"{node.name}_nd",
                                          reduction=reduction))
        replaced += 1
    del graph.node[:]
    graph.node.extend(_live(new_nodes, [o.name for o in graph.output]))
    used = {i for n in graph.node for i in n.input}
    keep = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    return replaced


def _constants(graph: onnx.GraphProto) -> dict:
    """Initializers and Constant-node values by name."""
    consts = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    for n in graph.node:
        value = _attr(n, "value") if n.op_type == "Constant" and n.output else None
        if value is not None:
            consts[n.output[0]] = onnx.numpy_helper.to_array(value)
    return consts


def _is_column(consts: dict, reshape) -> bool:
    """``reshape`` makes a ``[K, 1]`` tensor: a Reshape to ``[-1, 1]`` or an Unsqueeze on axis 1."""
    if reshape is None:
        return False
    if reshape.op_type == "Reshape" and reshape.input[1] in consts:
        shape = consts[reshape.input[1]].tolist()
        return len(shape) == 2 and shape[1] == 1
    if reshape.op_type == "Unsqueeze" and len(reshape.input) > 1 and reshape.input[1] in consts:
        return consts[reshape.input[1]].tolist() in ([1], [-1])
    return False


def _live(nodes: list[onnx.NodeProto], outputs: list[str]) -> list[onnx.NodeProto]:
    """The nodes that ``outputs`` depend on, in their original order."""
    producer = {out: i for i, n in enumerate(nodes) for out in n.output}
    need, keep = list(outputs), set()
    while need:
        i = producer.get(need.pop())
        if i is not None and i not in keep:
            keep.add(i)
            need.extend(nodes[i].input)
    return [n for i, n in enumerate(nodes) if i in keep]


def rewrite_file(path: str | os.PathLike, check: bool = True) -> int:
    """Rewrite ``path`` in place (atomically); with ``check``, refuse to write
    unless the new file matches the old one to 1e-5 relative on random graphs."""
    path = Path(path)
    model = onnx.load(str(path))
    replaced = scatter_rows(model)
    if not replaced:
        return 0
    onnx.checker.check_model(model)
    data = model.SerializeToString()
    if check:
        _check_same(path.read_bytes(), data)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return replaced


def _check_same(old: bytes, new: bytes) -> None:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sessions = [ort.InferenceSession(b, so, providers=["CPUExecutionProvider"]) for b in (old, new)]
    widths = {i.name: i.shape[1] for i in sessions[0].get_inputs() if len(i.shape) > 1}  # 2-D inputs
    rng = np.random.default_rng(0)
    for sizes in ([1], [5, 40, 3], [300]):
        n = sum(sizes)
        batch = np.repeat(np.arange(len(sizes)), sizes)
        edges = [(i, j) for g0, s in zip(np.cumsum([0] + sizes[:-1]), sizes)
                 for i, j in zip(range(g0, g0 + s - 1), range(g0 + 1, g0 + s))]
        edges += [(int(a), int(b)) for a, b in rng.integers(0, sizes[0], (sizes[0] // 2, 2))]
        ei = np.array(edges, np.int64).T.reshape(2, -1)
        feeds = {"x": rng.random((n, widths["x"]), np.float32) * 10, "edge_index": ei,
                 "edge_attr": rng.random((ei.shape[1], widths["edge_attr"]), np.float32) * 10,
                 "u": rng.random((len(sizes), widths["u"]), np.float32) * 10, "node_batch": batch}
        a, b = (s.run(None, feeds)[0] for s in sessions)
        if not np.allclose(a, b, rtol=1e-5, atol=0):
            raise RuntimeError(f"rewritten model differs (max rel {np.max(np.abs(a - b) / np.abs(a)):.2e})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    for f in args.files:
        print(f"{f}: {rewrite_file(f)} ScatterElements -> ScatterND")
    return 0


if __name__ == "__main__":
    sys.exit(main())
