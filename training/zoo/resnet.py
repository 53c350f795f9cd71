"""ResNet (He et al., 2016, "Deep Residual Learning for Image Recognition").

Spec: ``resnet:depth=50,width=1.0,res=224`` with

- ``depth``: 18, 34 (basic blocks) or 50, 101, 152 (bottleneck blocks, x4),
- ``width``: multiplier of the stage widths 64/128/256/512 (0.125..4),
- ``res``: input resolution in pixels (32..1024),
- ``classes``: output classes (default 1000).

Shapes: input (B, 3, res, res) float32 -> logits (B, classes).
The blocks are reused by the PerfSeer space (``resnet`` and ``resnext`` stages).
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
from training.zoo.layers import ClassifierHead, ConvBNAct


class BasicBlock(nn.Module):
    """Two k x k conv-BN layers plus shortcut (1x1 conv-BN projection when shapes change).

    Shapes: (B, c_in, H, W) -> (B, c_out, ceil(H/stride), ceil(W/stride)).
    """

    def __init__(self, c_in: int, c_out: int, stride: int = 1, k: int = 3) -> None:
        super().__init__()
        self.conv1 = ConvBNAct(c_in, c_out, k, stride)
        self.conv2 = ConvBNAct(c_out, c_out, k, activation=None)
        self.shortcut = (nn.Identity() if stride == 1 and c_in == c_out
                         else ConvBNAct(c_in, c_out, 1, stride, activation=None))
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.conv2(self.conv1(x)) + self.shortcut(x))


class Bottleneck(nn.Module):
    """1x1 reduce -> k x k (grouped, stride) -> 1x1 expand, plus shortcut (ResNet-B / ResNeXt).

    ``mid`` channels in the middle must be divisible by ``groups``.
    Shapes: (B, c_in, H, W) -> (B, c_out, ceil(H/stride), ceil(W/stride)).
    """

    def __init__(self, c_in: int, mid: int, c_out: int, stride: int = 1, groups: int = 1,
                 k: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(
            ConvBNAct(c_in, mid, 1),
            ConvBNAct(mid, mid, k, stride, groups=groups),
            ConvBNAct(mid, c_out, 1, activation=None),
        )
        self.shortcut = (nn.Identity() if stride == 1 and c_in == c_out
                         else ConvBNAct(c_in, c_out, 1, stride, activation=None))
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


#: depth -> (blocks per stage, bottleneck?)
LAYOUTS = {
    18: ((2, 2, 2, 2), False),
    34: ((3, 4, 6, 3), False),
    50: ((3, 4, 6, 3), True),
    101: ((3, 4, 23, 3), True),
    152: ((3, 8, 36, 3), True),
}


class ResNet(nn.Module):
    """Stem conv7x7/s2 + maxpool3x3/s2, four stages (first block of stages 2-4 has stride 2), GAP + FC."""

    def __init__(self, depth: int, width: float, classes: int) -> None:
        super().__init__()
        blocks, bottleneck = LAYOUTS[depth]
        stem = make_divisible(64 * width)
        layers: list[nn.Module] = [ConvBNAct(3, stem, 7, 2), nn.MaxPool2d(3, 2, 1)]
        c_in = stem
        for i, n in enumerate(blocks):
            base = make_divisible(64 * 2**i * width)
            for j in range(n):
                stride = 2 if (j == 0 and i > 0) else 1
                if bottleneck:
                    layers.append(Bottleneck(c_in, base, base * 4, stride))
                    c_in = base * 4
                else:
                    layers.append(BasicBlock(c_in, base, stride))
                    c_in = base
        self.features = nn.Sequential(*layers)
        self.head = ClassifierHead(c_in, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _build(p: dict) -> nn.Module:
    return ResNet(p["depth"], p["width"], p["classes"])


def _sample(rng: random.Random) -> dict:
    return {
        "depth": pick(rng, sorted(LAYOUTS)),
        "width": pick(rng, (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)),
        "res": pick(rng, (128, 160, 192, 224, 256, 288)),
    }


FAMILY = Family(
    name="resnet",
    doc=__doc__,
    params=(
        Param("depth", "int", 50, "number of layers", choices=tuple(sorted(LAYOUTS))),
        width_param(),
        res_param(),
        classes_param(),
    ),
    build=_build,
    sample=_sample,
    io=image_io(),
)
