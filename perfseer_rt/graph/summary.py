"""A short human summary of a PerfGraph (``perfseer-rt inspect``)."""

from __future__ import annotations

from collections import Counter

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
