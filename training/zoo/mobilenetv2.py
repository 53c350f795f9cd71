"""MobileNetV2 (Sandler et al., 2018, "Inverted Residuals and Linear Bottlenecks").

Spec: ``mobilenetv2:width=1.0,depth=1.0,res=224`` with

- ``width``: channel multiplier (0.125..4; channels rounded to multiples of 8;
  the last 1x1 conv keeps 1280 channels below width 1, as in the paper),
- ``depth``: multiplier of the repeats per stage (0.25..4, ceil),
- ``res``: input resolution in pixels (32..1024),
- ``classes``: output classes (default 1000).

Shapes: input (B, 3, res, res) float32 -> logits (B, classes).
"""

from __future__ import annotations

import math
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
from training.zoo.layers import ClassifierHead, ConvBNAct, InvertedResidual

#: (expansion t, output channels c, repeats n, first stride s) per stage.
SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
            (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class MobileNetV2(nn.Module):
    """Stem conv3x3/s2 (32), 17 inverted-residual blocks (ReLU6), conv1x1 1280, GAP + FC."""

    def __init__(self, width: float, depth: float, classes: int) -> None:
        super().__init__()
        c_in = make_divisible(32 * width)
        layers: list[nn.Module] = [ConvBNAct(3, c_in, 3, 2, activation="relu6")]
        for t, c, n, s in SETTINGS:
            c_out = make_divisible(c * width)
            for i in range(max(1, math.ceil(n * depth))):
                layers.append(InvertedResidual(c_in, c_out, 3, s if i == 0 else 1, c_in * t, "relu6"))
                c_in = c_out
        last = make_divisible(1280 * max(1.0, width))
        layers.append(ConvBNAct(c_in, last, 1, activation="relu6"))
        self.features = nn.Sequential(*layers)
        self.head = ClassifierHead(last, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _sample(rng: random.Random) -> dict:
    return {
        "width": pick(rng, (0.35, 0.5, 0.75, 1.0, 1.25, 1.4, 2.0)),
        "depth": pick(rng, (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)),
        "res": pick(rng, (96, 128, 160, 192, 224, 256, 320)),
    }


FAMILY = Family(
    name="mobilenetv2",
    doc=__doc__,
    params=(
        width_param(),
        Param("depth", "float", 1.0, "multiplier of block repeats", lo=0.25, hi=4.0),
        res_param(),
        classes_param(),
    ),
    build=lambda p: MobileNetV2(p["width"], p["depth"], p["classes"]),
    sample=_sample,
    io=image_io(),
)
