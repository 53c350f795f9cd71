"""EfficientNet (Tan & Le, 2019) with compound width/depth/resolution scaling.

Spec: ``efficientnet:width=1.0,depth=1.0,res=224`` or ``efficientnet:variant=b2``
(a preset filling width/depth/res; given values win) with

- ``width``: channel multiplier (0.25..3; multiples of 8),
- ``depth``: multiplier of block repeats (0.25..4, ceil),
- ``res``: input resolution in pixels (32..1024),
- ``classes``: output classes (default 1000).

Presets b0..b7 = (width, depth, res): (1.0, 1.0, 224), (1.0, 1.1, 240),
(1.1, 1.2, 260), (1.2, 1.4, 300), (1.4, 1.8, 380), (1.6, 2.2, 456),
(1.8, 2.6, 528), (2.0, 3.1, 600). Blocks: MBConv with SiLU and
squeeze-excite (squeeze = input channels / 4). Head: conv1x1 1280 x width, GAP, FC.
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

#: B0 stages: (expansion, kernel, first stride, output channels, repeats)
STAGES = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
          (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))
PRESETS = {
    "b0": (1.0, 1.0, 224), "b1": (1.0, 1.1, 240), "b2": (1.1, 1.2, 260), "b3": (1.2, 1.4, 300),
    "b4": (1.4, 1.8, 380), "b5": (1.6, 2.2, 456), "b6": (1.8, 2.6, 528), "b7": (2.0, 3.1, 600),
}


class EfficientNet(nn.Module):
    """Stem conv3x3/s2 (32 x width, SiLU), scaled MBConv stages, conv1x1, GAP + FC."""

    def __init__(self, width: float, depth: float, classes: int) -> None:
        super().__init__()
        c_in = make_divisible(32 * width)
        layers: list[nn.Module] = [ConvBNAct(3, c_in, 3, 2, activation="silu")]
        for e, k, s, c, n in STAGES:
            c_out = make_divisible(c * width)
            for i in range(max(1, math.ceil(n * depth))):
                se = max(1, c_in // 4)
                layers.append(InvertedResidual(c_in, c_out, k, s if i == 0 else 1, c_in * e, "silu",
                                               se, "silu", "sigmoid"))
                c_in = c_out
        last = make_divisible(1280 * width)
        layers.append(ConvBNAct(c_in, last, 1, activation="silu"))
        self.features = nn.Sequential(*layers)
        self.head = ClassifierHead(last, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _sample(rng: random.Random) -> dict:
    w, d, r = PRESETS[pick(rng, ("b0", "b1", "b2", "b3"))]
    return {
        "width": round(w * pick(rng, (0.5, 0.75, 1.0, 1.0, 1.25)), 3),
        "depth": round(d * pick(rng, (0.75, 1.0, 1.0, 1.25)), 3),
        "res": pick(rng, (r - 32, r, r + 32)),
    }


FAMILY = Family(
    name="efficientnet",
    doc=__doc__,
    params=(
        width_param(lo=0.25, hi=3.0),
        Param("depth", "float", 1.0, "multiplier of block repeats", lo=0.25, hi=4.0),
        res_param(),
        classes_param(),
    ),
    build=lambda p: EfficientNet(p["width"], p["depth"], p["classes"]),
    sample=_sample,
    io=image_io(),
    presets={k: {"width": w, "depth": d, "res": r} for k, (w, d, r) in PRESETS.items()},
)
