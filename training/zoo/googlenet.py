"""GoogLeNet / Inception v1 (Szegedy et al., 2015, "Going Deeper with Convolutions").

Spec: ``googlenet:width=1.0,res=224`` with

- ``width``: multiplier of every branch width (0.125..4; multiples of 8),
- ``res``: input resolution in pixels (32..1024),
- ``classes``: output classes (default 1000).

Conv layers carry BatchNorm (folded on export) instead of the paper's LRN;
the auxiliary classifiers (training only) are omitted. The 5x5 branch uses a
5x5 conv as in the paper. Max pools use ceil mode.
Shapes: input (B, 3, res, res) float32 -> logits (B, classes).
The inception module is reused by the PerfSeer space.
"""

from __future__ import annotations

import random

import torch
from torch import nn

from training.zoo.family import (
    Family,
    classes_param,
    image_io,
    make_divisible,
    pick,
    res_param,
    width_param,
)
from training.zoo.layers import ConvBNAct

#: Inception modules: (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool proj); "M" = max pool 3x3/s2.
MODULES = (
    (64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), "M",
    (192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64), (128, 128, 256, 24, 64, 64),
    (112, 144, 288, 32, 64, 64), (256, 160, 320, 32, 128, 128), "M",
    (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128),
)


class Inception(nn.Module):
    """Four parallel branches concatenated on channels.

    1x1 | 1x1 -> 3x3 | 1x1 -> k x k (5x5 in GoogLeNet) | maxpool3x3/s1 -> 1x1.
    Shapes: (B, c_in, H, W) -> (B, b1 + b3 + bk + bp, H, W).
    """

    def __init__(self, c_in: int, b1: int, r3: int, b3: int, rk: int, bk: int, bp: int,
                 k: int = 5) -> None:
        super().__init__()
        self.branch1 = ConvBNAct(c_in, b1, 1)
        self.branch3 = nn.Sequential(ConvBNAct(c_in, r3, 1), ConvBNAct(r3, b3, 3))
        self.branchk = nn.Sequential(ConvBNAct(c_in, rk, 1), ConvBNAct(rk, bk, k))
        self.branchp = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), ConvBNAct(c_in, bp, 1))
        self.c_out = b1 + b3 + bk + bp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1(x), self.branch3(x), self.branchk(x), self.branchp(x)], 1)


class GoogLeNet(nn.Module):
    """Conv7x7/s2, maxpool, conv1x1, conv3x3, maxpool, nine inception modules, GAP + FC."""

    def __init__(self, width: float, classes: int) -> None:
        super().__init__()

        def w(c: int) -> int:
            return make_divisible(c * width)

        layers: list[nn.Module] = [
            ConvBNAct(3, w(64), 7, 2), nn.MaxPool2d(3, 2, ceil_mode=True),
            ConvBNAct(w(64), w(64), 1), ConvBNAct(w(64), w(192), 3), nn.MaxPool2d(3, 2, ceil_mode=True),
        ]
        c = w(192)
        for spec in MODULES:
            if isinstance(spec, str):  # "M"
                layers.append(nn.MaxPool2d(3, 2, ceil_mode=True))
                continue
            block = Inception(c, *(w(v) for v in spec))
            layers.append(block)
            c = block.c_out
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(1), nn.Dropout(0.4), nn.Linear(c, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _sample(rng: random.Random) -> dict:
    return {
        "width": pick(rng, (0.25, 0.5, 0.75, 1.0, 1.25, 1.5)),
        "res": pick(rng, (96, 128, 160, 192, 224, 256, 299)),
    }


FAMILY = Family(
    name="googlenet",
    doc=__doc__,
    params=(width_param(), res_param(), classes_param()),
    build=lambda p: GoogLeNet(p["width"], p["classes"]),
    sample=_sample,
    io=image_io(),
)
