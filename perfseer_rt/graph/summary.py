"""A short human summary of a PerfGraph (``perfseer-rt inspect``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from perfseer_rt.graph.perfgraph import PerfGraph


def human(n: float, unit: str = "") -> str:
    """1234567 -> '1.23 M' (SI prefixes)."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {prefix}{unit}"
    return f"{n:.0f} {unit}".rstrip()


def summarize(graph: PerfGraph, top: int = 5) -> str:
    """Nodes, FLOPs, params and the heaviest layers, as printable text."""
    g = graph.globals
    ops = Counter(graph.node_ops)
    lines = [
        "inputs:     " + ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in graph.input_shapes.items()),
        f"nodes:      {g['num_nodes']}  edges: {g['num_edges']}  batch: {g['batch_size']}",
        f"FLOPs:      {human(g['flops_total'], 'FLOP')}",
        f"params:     {human(g['params_total'])} ({human(g['weight_total'], 'B')} of weights)",
        f"memory access: {human(g['mac_total'], 'B')}  arithmetic intensity: "
        f"{g['ai_model']:.1f} FLOP/B",
        "ops:        " + ", ".join(f"{op} x{n}" for op, n in ops.most_common(8)),
    ]
    flops = graph.node_column("flops")
    order = np.argsort(-flops, kind="stable")[:top]
    lines.append(f"heaviest {len(order)} layers by FLOPs:")
    total = flops.sum() or 1.0
    names = [graph.node_names[i] for i in order]
    wide = max((len(n) for n in names), default=0)  # columns line up whatever the names
    ops_wide = max((len(graph.node_ops[i]) for i in order), default=0)
    for name, i in zip(names, order):
        lines.append(f"  {name:<{wide}}  {graph.node_ops[i]:<{ops_wide}} "
                     f"{human(flops[i], 'FLOP'):>14} {100 * flops[i] / total:5.1f} %")
    if graph.unknown_ops:
        lines.append("generic cost used for: " + ", ".join(sorted(set(graph.unknown_ops))))
    return "\n".join(lines)


def layer_table(graph: PerfGraph) -> dict[str, Any]:
    """The summary as data (``perfseer-rt inspect --json``): totals, op
    counts and one row per layer (node) in graph order with its FLOPs,
    bytes moved (``mac_bytes``: inputs + weights + outputs), weight bytes,
    parameters, arithmetic intensity (FLOP/B), share of the model's FLOPs
    and the shapes of the tensors it sends to other layers."""
    g = graph.globals
    cols = {c: graph.node_column(c) for c in ("flops", "mac", "weight", "params", "ai",
                                              "flops_ratio", "out_elems")}
    sends: dict[int, dict[str, list[int]]] = {}
    for j in range(graph.num_edges):
        src = int(graph.edge_index[0, j])
        sends.setdefault(src, {})[graph.edge_tensors[j]] = list(graph.edge_shapes[j])
    layers = [{"index": i, "name": name, "op": op,
               "flops": float(cols["flops"][i]), "mac_bytes": float(cols["mac"][i]),
               "weight_bytes": float(cols["weight"][i]), "params": float(cols["params"][i]),
               "ai_flop_per_byte": float(cols["ai"][i]), "flops_share": float(cols["flops_ratio"][i]),
               "out_elems": float(cols["out_elems"][i]),
               "outputs": [{"tensor": t, "shape": shape} for t, shape in sends.get(i, {}).items()]}
              for i, (name, op) in enumerate(zip(graph.node_names, graph.node_ops))]
    return {
        "input_shapes": {k: list(v) for k, v in graph.input_shapes.items()},
        "batch": int(g["batch_size"]),
        "totals": {"nodes": int(g["num_nodes"]), "edges": int(g["num_edges"]),
                   "flops": float(g["flops_total"]), "mac_bytes": float(g["mac_total"]),
                   "params": float(g["params_total"]), "weight_bytes": float(g["weight_total"]),
                   "ai_flop_per_byte": float(g["ai_model"])},
        "ops": dict(Counter(graph.node_ops).most_common()),
        "layers": layers,
        "unknown_ops": sorted(set(graph.unknown_ops)),
        "warnings": list(graph.warnings),
        "feature_version": graph.feature_version,
    }
