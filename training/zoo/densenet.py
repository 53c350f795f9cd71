"""DenseNet-BC (Huang et al., 2017, "Densely Connected Convolutional Networks").

Spec: ``densenet:depth=121,width=1.0,res=224`` with

- ``depth``: 121, 169, 201 or 264 (layers per dense block 6/12/{24,32,48,64}/{16,32,32,48}),
- ``width``: multiplier of the growth rate 32 (stem = 2 x growth),
- ``res``: input resolution in pixels (32..1024),
- ``classes``: output classes (default 1000).

Dense layer: BN-ReLU-Conv1x1(4 x growth)-BN-ReLU-Conv3x3(growth), output
concatenated to its input. Transition: BN-ReLU-Conv1x1(half)-AvgPool2x2.
Pre-activation BNs stay in the exported graph (there is no conv to fold them into).
Shapes: input (B, 3, res, res) float32 -> logits (B, classes).
The dense block and transition are reused by the PerfSeer space.
"""

from __future__ import annotations

import random

import torch
from torch import nn

from training.zoo.family import (
    Family,
    Param,
    classes_param,
    image_io,
    make_divisible,
    pick,
    res_param,
    width_param,
)
from training.zoo.layers import ConvBNAct

LAYOUTS = {121: (6, 12, 24, 16), 169: (6, 12, 32, 32), 201: (6, 12, 48, 32), 264: (6, 12, 64, 48)}


class DenseLayer(nn.Module):
    """BN-ReLU-Conv1x1(mid)-BN-ReLU-Conv(k)(growth); returns cat(x, new): (B, C, H, W) -> (B, C+growth, H, W)."""

    def __init__(self, c_in: int, growth: int, mid: int, k: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm2d(c_in), nn.ReLU(), nn.Conv2d(c_in, mid, 1, bias=False),
            nn.BatchNorm2d(mid), nn.ReLU(), nn.Conv2d(mid, growth, k, padding=k // 2, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.body(x)], 1)


class DenseBlock(nn.Sequential):
    """``n`` dense layers: (B, C, H, W) -> (B, C + n * growth, H, W)."""

    def __init__(self, c_in: int, n: int, growth: int, mid: int, k: int = 3) -> None:
        super().__init__(*[DenseLayer(c_in + i * growth, growth, mid, k) for i in range(n)])
        self.c_out = c_in + n * growth


class Transition(nn.Sequential):
    """BN-ReLU-Conv1x1(c_out)-AvgPool2x2: (B, c_in, H, W) -> (B, c_out, H/2, W/2)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__(nn.BatchNorm2d(c_in), nn.ReLU(), nn.Conv2d(c_in, c_out, 1, bias=False),
                         nn.AvgPool2d(2, 2))


class DenseNet(nn.Module):
    """Stem conv7x7/s2 + maxpool, four dense blocks joined by transitions, BN-ReLU, GAP + FC."""

    def __init__(self, depth: int, width: float, classes: int) -> None:
        super().__init__()
        growth = make_divisible(32 * width, 4)
        c = 2 * growth
        layers: list[nn.Module] = [ConvBNAct(3, c, 7, 2), nn.MaxPool2d(3, 2, 1)]
        blocks = LAYOUTS[depth]
        for i, n in enumerate(blocks):
            block = DenseBlock(c, n, growth, 4 * growth)
            layers.append(block)
            c = block.c_out
            if i < len(blocks) - 1:
                layers.append(Transition(c, c // 2))
                c //= 2
        layers += [nn.BatchNorm2d(c), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(1), nn.Linear(c, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _sample(rng: random.Random) -> dict:
    return {
        "depth": pick(rng, (121, 169, 201)),
        "width": pick(rng, (0.5, 0.75, 1.0, 1.5)),
        "res": pick(rng, (128, 160, 192, 224, 256)),
    }


FAMILY = Family(
    name="densenet",
    doc=__doc__,
    params=(
        Param("depth", "int", 121, "number of layers", choices=tuple(sorted(LAYOUTS))),
        width_param(hi=3.0),
        res_param(),
        classes_param(),
    ),
    build=lambda p: DenseNet(p["depth"], p["width"], p["classes"]),
    sample=_sample,
    io=image_io(),
)
