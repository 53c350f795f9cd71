"""NAS-Bench-201 networks as NAS-Bench-201's own PyTorch code runs them.

The zoo's ``nb201:<cell>`` export is the network as a deployment would run
it: ``none`` edges are omitted and operations whose result never reaches the
cell output are removed by the exporter's dead-code elimination. The HELP
latencies were measured on NAS-Bench-201's PyTorch ``InferCell``, which
runs every edge of every cell in order: a ``none`` edge is a multiply by
zero (``x.mul(0.)``) added into its node, and a node that feeds nothing is
still computed. This module exports that executed graph, so the PerfGraph
holds the operations that were timed:

- every ``none`` edge is ``x * 0`` summed into its node;
- the output of every cell node that does not reach the cell output is kept
  alive as an extra graph output (``dead_<k>``; outputs add no operations).

Spec: ``nb201-eager:<cell>`` (same cell strings as the zoo's ``nb201``).
The skeleton (stem, reduction blocks, head), the operations and the
deterministic weights are the zoo's (:mod:`training.zoo.nb201`,
:func:`training.zoo.export.deterministic_init`).
"""

from __future__ import annotations

import hashlib
import io
import warnings
from pathlib import Path

import torch
from torch import nn

from training.byod.strip import strip_file
from training.zoo.export import deterministic_init
from training.zoo.nb201 import NODES, format_cell, make_op, parse_cell, stages

PREFIX = "nb201-eager"


def canonical(cell: str) -> str:
    """The canonical cell string (raises the zoo's SpecError when malformed)."""
    return format_cell(parse_cell(cell))


def arch_id(cell: str) -> str:
    return hashlib.sha256(f"{PREFIX}|{canonical(cell)}".encode()).hexdigest()[:16]


class EagerCell(nn.Module):
    """NAS-Bench-201's ``InferCell``: every edge runs, ``none`` = ``x * 0``.

    Shapes: (B, C, H, W) -> ((B, C, H, W), [dead node outputs]).
    """

    def __init__(self, nodes: list[list[str]], channels: int) -> None:
        super().__init__()
        self.nodes = [list(ops) for ops in nodes]
        self.edges = nn.ModuleDict({f"{i}_{j}": make_op(op, channels)
                                    for j, ops in enumerate(self.nodes, start=1)
                                    for i, op in enumerate(ops) if op != "none"})
        used = [False] * NODES
        used[-1] = True
        for j in range(NODES - 1, 0, -1):
            if used[j]:
                for i, op in enumerate(self.nodes[j - 1]):
                    if op != "none":
                        used[i] = True
        self.dead = [j for j in range(1, NODES - 1) if not used[j]]

    def forward(self, x: torch.Tensor):
        states = [x]
        for j, ops in enumerate(self.nodes, start=1):
            terms = [states[i] * 0.0 if op == "none" else self.edges[f"{i}_{j}"](states[i])
                     for i, op in enumerate(ops)]
            out = terms[0]
            for t in terms[1:]:
                out = out + t
            states.append(out)
        return states[-1], [states[j] for j in self.dead]


class EagerTinyNetwork(nn.Module):
    """The zoo's NAS-Bench-201 TinyNetwork with :class:`EagerCell` cells;
    returns the logits and every dead node's output."""

    def __init__(self, cell: str, channels: int = 16, cells: int = 5, classes: int = 10) -> None:
        super().__init__()
        nodes = parse_cell(cell)
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, 1, 1, bias=False), nn.BatchNorm2d(channels))
        blocks, c = stages(lambda width: EagerCell(nodes, width), channels, cells)
        self.blocks = nn.ModuleList(blocks)
        self.tail = nn.Sequential(nn.BatchNorm2d(c), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(1), nn.Linear(c, classes))

    def forward(self, x: torch.Tensor):
        x = self.stem(x)
        dead: list[torch.Tensor] = []
        for block in self.blocks:
            if isinstance(block, EagerCell):
                x, d = block(x)
                dead += d
            else:
                x = block(x)
        return (self.head(self.tail(x)), *dead)


def export(cell: str, path: str | Path, opset: int = 18) -> Path:
    """Export the executed graph of ``cell`` (dynamic batch, structure only)."""
    cell = canonical(cell)
    with torch.device("meta"):
        model = EagerTinyNetwork(cell)
    model = model.to_empty(device="cpu")
    deterministic_init(model, int(arch_id(cell)[:8], 16) & 0x7FFFFFFF).eval()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        n_out = len(model(x))
    names = ["logits"] + [f"dead_{k}" for k in range(n_out - 1)]
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), buf, dynamo=False, opset_version=opset,  # type: ignore[arg-type]
                          do_constant_folding=True,  # (a file object: see training.zoo.export)
                          input_names=["input"], output_names=names,
                          dynamic_axes={n: {0: "batch"} for n in ["input", *names]})
    path = Path(path)
    path.write_bytes(buf.getvalue())
    strip_file(path)
    return path
