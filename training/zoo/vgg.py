"""VGG (Simonyan & Zisserman, 2015) with BatchNorm (folded away on export).

Spec: ``vgg:depth=16,width=1.0,res=224`` with

- ``depth``: 11, 13, 16 or 19 weight layers,
- ``width``: multiplier of conv widths 64..512 and of the 4096-wide FC layers,
- ``res``: input resolution in pixels (32..448),
- ``classes``: output classes (default 1000).

The classifier flattens the final feature map (side: res halved, rounding
down, five times -- 7 at 224), so at 224 it
is exactly VGG's 7x7x512 -> 4096 -> 4096 -> classes; the first FC grows with
res^2 (configs whose first FC exceeds 400 M weights are rejected).
Shapes: input (B, 3, res, res) float32 -> logits (B, classes).
"""

from __future__ import annotations

import random

import torch
from torch import nn

from training.zoo.errors import SpecError
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

#: depth -> conv widths per stage (each stage ends in a 2x2 max pool).
LAYOUTS = {
    11: ((64,), (128,), (256, 256), (512, 512), (512, 512)),
    13: ((64, 64), (128, 128), (256, 256), (512, 512), (512, 512)),
    16: ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512)),
    19: ((64, 64), (128, 128), (256,) * 4, (512,) * 4, (512,) * 4),
}
MAX_FC1_WEIGHTS = 400_000_000


def _dims(p: dict) -> tuple[int, int, int]:
    """(last conv width, hidden FC width, first-FC input features)."""
    c_last = make_divisible(512 * p["width"])
    hidden = make_divisible(4096 * p["width"])
    side = p["res"]
    for _ in range(5):  # five MaxPool 2x2 (floor)
        side //= 2
    return c_last, hidden, c_last * side * side


class VGG(nn.Module):
    """Five stages of 3x3 conv-BN-ReLU, each followed by MaxPool 2x2; three FC layers."""

    def __init__(self, depth: int, width: float, res: int, classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for stage in LAYOUTS[depth]:
            for c in stage:
                c_out = make_divisible(c * width)
                layers.append(ConvBNAct(c_in, c_out, 3))
                c_in = c_out
            layers.append(nn.MaxPool2d(2, 2))
        self.features = nn.Sequential(*layers)
        _, hidden, fc_in = _dims({"width": width, "res": res})
        self.classifier = nn.Sequential(
            nn.Flatten(1),
            nn.Linear(fc_in, hidden), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(hidden, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def _check(p: dict) -> dict:
    _, hidden, fc_in = _dims(p)
    if fc_in * hidden > MAX_FC1_WEIGHTS:
        raise SpecError(f"vgg res={p['res']} width={p['width']} gives a first FC layer of "
                        f"{fc_in * hidden / 1e6:.0f} M weights (limit {MAX_FC1_WEIGHTS / 1e6:.0f} M); "
                        "lower res or width")
    return p


def _sample(rng: random.Random) -> dict:
    return {
        "depth": pick(rng, sorted(LAYOUTS)),
        "width": pick(rng, (0.25, 0.375, 0.5, 0.75, 1.0)),
        "res": pick(rng, (64, 96, 128, 160, 192, 224)),
    }


FAMILY = Family(
    name="vgg",
    doc=__doc__,
    params=(
        Param("depth", "int", 16, "number of weight layers", choices=tuple(sorted(LAYOUTS))),
        width_param(hi=2.0),
        res_param(hi=448),
        classes_param(),
    ),
    build=lambda p: VGG(p["depth"], p["width"], p["res"], p["classes"]),
    sample=_sample,
    io=image_io(),
    check=_check,
)
