"""NAS-Bench-201 TinyNetwork for CIFAR-10 (Dong & Yang, 2020), built from a cell string.

Spec: ``nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|``
(the cell string is a bare token; optional ``channels=16``, ``cells=5``,
``classes=10``, ``res=32`` change the macro skeleton).

Cell string: nodes 1..3 separated by ``+``; node j lists ``op~i`` for every
earlier node i = 0..j-1 in order; node 0 is the cell input, the last node its
output. Node j = sum of op(node i) over its edges. Operations:

- ``none``: zero -- the edge is omitted from the graph,
- ``skip_connect``: identity,
- ``nor_conv_1x1`` / ``nor_conv_3x3``: ReLU -> Conv(no bias) -> BN,
- ``avg_pool_3x3``: AvgPool 3x3, stride 1, padding 1 (padding not counted).

A node whose edges are all ``none`` is zero. It is computed as
``cell_input * 0`` (one ``Mul`` by a constant; the graph stays connected and
exportable with a dynamic batch, as NAS-Bench-201's own ``Zero`` op does).
Ops reading an unused node vanish from the export (dead-code elimination).

Network: stem Conv3x3(C)+BN; three stages of ``cells`` cells at C, 2C, 4C
channels, joined by residual reduction blocks (ReLU-Conv3x3/s2-BN,
ReLU-Conv3x3-BN; shortcut AvgPool 2x2/s2 + Conv1x1); BN, ReLU, global average
pooling, Linear(classes).
Shapes: input (B, 3, res, res) float32 -> logits (B, classes).
"""

from __future__ import annotations

import random

import torch
from torch import nn

from training.zoo.errors import SpecError
from training.zoo.family import Family, Param, image_io, pick

OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
NODES = 4  # nodes per cell including the input node
DEFAULT_CELL = "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"


def parse_cell(text: str) -> list[list[str]]:
    """Cell string -> ``ops[j-1][i]`` = operation on edge i -> j (j = 1..3).

    Raises :class:`SpecError` naming the bad token for unknown operations,
    wrong node indices or a wrong number of nodes.
    """
    if not isinstance(text, str):
        raise SpecError(f"bad nb201 cell {text!r}: expected a string like {DEFAULT_CELL}")
    parts = text.strip().split("+")
    if len(parts) != NODES - 1:
        raise SpecError(f"bad nb201 cell '{text}': expected {NODES - 1} nodes separated by '+', "
                        f"like {DEFAULT_CELL}")
    nodes = []
    for j, part in enumerate(parts, start=1):
        tokens = [t for t in part.strip().split("|") if t.strip()]
        if len(tokens) != j:
            raise SpecError(f"bad nb201 cell '{text}': node {j} ('{part}') must list {j} edge(s) "
                            f"op~0..op~{j - 1}")
        ops = []
        for i, token in enumerate(tokens):
            op, sep, src = token.strip().partition("~")
            if op not in OPS:
                raise SpecError(f"bad nb201 cell '{text}': unknown operation '{op}' in '{token}'; "
                                "valid operations: " + ", ".join(OPS))
            if sep != "~" or src != str(i):
                raise SpecError(f"bad nb201 cell '{text}': edge '{token}' of node {j} must read "
                                f"'{op}~{i}'")
            ops.append(op)
        nodes.append(ops)
    return nodes


def format_cell(nodes: list[list[str]]) -> str:
    """Inverse of :func:`parse_cell` (canonical text, no spaces)."""
    return "+".join("|" + "|".join(f"{op}~{i}" for i, op in enumerate(ops)) + "|" for ops in nodes)


class ReLUConvBN(nn.Sequential):
    """ReLU -> Conv(k, stride, no bias) -> BN: (B, c_in, H, W) -> (B, c_out, H/stride, W/stride)."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int = 1) -> None:
        super().__init__(nn.ReLU(), nn.Conv2d(c_in, c_out, k, stride, k // 2, bias=False), nn.BatchNorm2d(c_out))


def make_op(name: str, channels: int) -> nn.Module:
    """The module of a non-``none`` cell operation (channels preserved)."""
    if name == "skip_connect":
        return nn.Identity()
    if name == "nor_conv_1x1":
        return ReLUConvBN(channels, channels, 1)
    if name == "nor_conv_3x3":
        return ReLUConvBN(channels, channels, 3)
    if name == "avg_pool_3x3":
        return nn.AvgPool2d(3, 1, 1, count_include_pad=False)
    raise ValueError(name)


class Cell(nn.Module):
    """One NAS-Bench-201 cell: (B, C, H, W) -> (B, C, H, W); see the module doc for ``none``."""

    def __init__(self, nodes: list[list[str]], channels: int) -> None:
        super().__init__()
        self.nodes = [list(ops) for ops in nodes]
        self.edges = nn.ModuleDict({
            f"{i}_{j}": make_op(op, channels)
            for j, ops in enumerate(self.nodes, start=1) for i, op in enumerate(ops) if op != "none"
        })

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        states = [x]
        for j, ops in enumerate(self.nodes, start=1):
            terms = [self.edges[f"{i}_{j}"](states[i]) for i, op in enumerate(ops) if op != "none"]
            if not terms:
                states.append(x * 0.0)
                continue
            out = terms[0]
            for t in terms[1:]:
                out = out + t
            states.append(out)
        return states[-1]


class ReductionBlock(nn.Module):
    """Residual stride-2 block: ReLUConvBN(3x3, s2) -> ReLUConvBN(3x3) + (AvgPool2x2/s2 -> Conv1x1).

    Shapes: (B, c_in, H, W) -> (B, c_out, H/2, W/2).
    """

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv_a = ReLUConvBN(c_in, c_out, 3, 2)
        self.conv_b = ReLUConvBN(c_out, c_out, 3, 1)
        self.downsample = nn.Sequential(nn.AvgPool2d(2, 2), nn.Conv2d(c_in, c_out, 1, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_b(self.conv_a(x)) + self.downsample(x)


def stages(make_cell, channels: int, cells: int) -> tuple[list[nn.Module], int]:
    """The NAS-Bench-201 body: three stages of ``cells`` cells, a residual
    reduction block (channels doubled) between stages; ``make_cell(c)``
    builds one cell of ``c`` channels. Returns the blocks and the final
    channel count."""
    blocks: list[nn.Module] = []
    c = channels
    for stage in range(3):
        if stage:
            blocks.append(ReductionBlock(c, 2 * c))
            c *= 2
        blocks += [make_cell(c) for _ in range(cells)]
    return blocks, c


class TinyNetwork(nn.Module):
    """The NAS-Bench-201 macro skeleton around one cell type."""

    def __init__(self, cell: str, channels: int, cells: int, classes: int) -> None:
        super().__init__()
        nodes = parse_cell(cell)
        body, c = stages(lambda width: Cell(nodes, width), channels, cells)
        layers: list[nn.Module] = [nn.Conv2d(3, channels, 3, 1, 1, bias=False), nn.BatchNorm2d(channels),
                                   *body, nn.BatchNorm2d(c), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(1), nn.Linear(c, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _sample(rng: random.Random) -> dict:
    nodes = [[pick(rng, OPS) for _ in range(j)] for j in range(1, NODES)]
    return {"cell": format_cell(nodes)}


FAMILY = Family(
    name="nb201",
    doc=__doc__,
    params=(
        Param("cell", "custom", DEFAULT_CELL, "NAS-Bench-201 cell string",
              coerce_fn=lambda v: format_cell(parse_cell(v))),
        Param("channels", "int", 16, "channels of the first stage", lo=1, hi=1024, in_spec=False),
        Param("cells", "int", 5, "cells per stage", lo=1, hi=32, in_spec=False),
        Param("res", "int", 32, "input resolution in pixels", lo=8, hi=1024, multiple_of=4, in_spec=False),
        Param("classes", "int", 10, "number of output classes", lo=1, hi=100000, in_spec=False),
    ),
    build=lambda p: TinyNetwork(p["cell"], p["channels"], p["cells"], p["classes"]),
    sample=_sample,
    io=image_io(),
    bare_param="cell",
)
