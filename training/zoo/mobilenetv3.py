"""MobileNetV3 (Howard et al., 2019, "Searching for MobileNetV3"), small and large.

Spec: ``mobilenetv3:variant=large,width=1.0,res=224`` with

- ``variant``: ``small`` or ``large`` (the block tables of the paper),
- ``width``: channel multiplier (0.125..4; channels rounded to multiples of 8),
- ``res``: input resolution in pixels (32..1024),
- ``classes``: output classes (default 1000).

Blocks: inverted residuals with ReLU or hard-swish, squeeze-excite with a
hard-sigmoid gate. Head: conv1x1, GAP, Linear(1280 | 1024), hard-swish, Linear.
Shapes: input (B, 3, res, res) float32 -> logits (B, classes).
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
from training.zoo.layers import ConvBNAct, InvertedResidual

# (kernel, expanded channels, output channels, squeeze-excite, activation, stride)
LARGE = (
    (3, 16, 16, False, "relu", 1), (3, 64, 24, False, "relu", 2), (3, 72, 24, False, "relu", 1),
    (5, 72, 40, True, "relu", 2), (5, 120, 40, True, "relu", 1), (5, 120, 40, True, "relu", 1),
    (3, 240, 80, False, "hswish", 2), (3, 200, 80, False, "hswish", 1),
    (3, 184, 80, False, "hswish", 1), (3, 184, 80, False, "hswish", 1),
    (3, 480, 112, True, "hswish", 1), (3, 672, 112, True, "hswish", 1),
    (5, 672, 160, True, "hswish", 2), (5, 960, 160, True, "hswish", 1),
    (5, 960, 160, True, "hswish", 1),
)
SMALL = (
    (3, 16, 16, True, "relu", 2), (3, 72, 24, False, "relu", 2), (3, 88, 24, False, "relu", 1),
    (5, 96, 40, True, "hswish", 2), (5, 240, 40, True, "hswish", 1), (5, 240, 40, True, "hswish", 1),
    (5, 120, 48, True, "hswish", 1), (5, 144, 48, True, "hswish", 1),
    (5, 288, 96, True, "hswish", 2), (5, 576, 96, True, "hswish", 1), (5, 576, 96, True, "hswish", 1),
)
#: variant -> (blocks, last conv channels, hidden FC width)
VARIANTS = {"large": (LARGE, 960, 1280), "small": (SMALL, 576, 1024)}


class MobileNetV3(nn.Module):
    """Stem conv3x3/s2 (16, hard-swish), the variant's blocks, conv1x1, GAP, 2-layer head."""

    def __init__(self, variant: str, width: float, classes: int) -> None:
        super().__init__()
        blocks, last, hidden = VARIANTS[variant]
        c_in = make_divisible(16 * width)
        layers: list[nn.Module] = [ConvBNAct(3, c_in, 3, 2, activation="hswish")]
        for k, exp, c, se, activation, s in blocks:
            exp_ch = make_divisible(exp * width)
            c_out = make_divisible(c * width)
            se_ch = make_divisible(exp_ch / 4) if se else 0
            layers.append(InvertedResidual(c_in, c_out, k, s, exp_ch, activation, se_ch, "relu", "hsigmoid"))
            c_in = c_out
        last_ch = make_divisible(last * width)
        layers.append(ConvBNAct(c_in, last_ch, 1, activation="hswish"))
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(1),
            nn.Linear(last_ch, hidden), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(hidden, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _sample(rng: random.Random) -> dict:
    return {
        "variant": pick(rng, ("small", "large")),
        "width": pick(rng, (0.35, 0.5, 0.75, 1.0, 1.25, 1.5)),
        "res": pick(rng, (96, 128, 160, 192, 224, 256)),
    }


FAMILY = Family(
    name="mobilenetv3",
    doc=__doc__,
    params=(
        Param("variant", "str", "large", "block table", choices=("small", "large")),
        width_param(),
        res_param(),
        classes_param(),
    ),
    build=lambda p: MobileNetV3(p["variant"], p["width"], p["classes"]),
    sample=_sample,
    io=image_io(),
)
