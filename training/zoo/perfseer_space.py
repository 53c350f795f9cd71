"""The PerfSeer random architecture space (four stages of mixed styles).

Network: stem Conv3x3/s2 (``stem`` = 32 channels)-BN-ReLU; four stages, each
halving the resolution at its start and built in its own style; global average
pooling; Linear(classes). At res 224 the stages run at 56, 28, 14, 7 pixels.

Spec, e.g.::

    perfseer:res=224,s1=resnet-d2-w64-k3-r1,s2=mobilenet-d3-w96-k5-r6,s3=resnext-d2-w256-k3-r0.5-g16,
             s4=densenet-d6-w32-k3-r4

(one line, no spaces; wrapped here)

A stage token is ``STYLE-dDEPTH-wWIDTH[-kKERNEL][-rRATIO][-gGROUP]``:

=========== ================================ =========================================== ==================
style       downsampling, block              ``r`` (ratio) means / allowed                ``w`` means
=========== ================================ =========================================== ==================
vgg         MaxPool 2x2, then d conv-BN-ReLU (unused)                                     conv width
inception   MaxPool 3x3/s2, then d GoogLeNet  1x1-reduce / branch width: .25 .5 .75 1      module output
            modules (1x1 | 3x3 | k x k | pool)
resnet      first block stride 2             bottleneck mid / width: .25 .5 (1 = basic    block output
                                             block of two k x k convs)
resnext     first block stride 2             grouped bottleneck mid / width: .25 .5 1     block output
            (``g`` = channels per group: 4 8 16 32 64)
densenet    transition (BN-ReLU-1x1 to half,  bottleneck width / growth: 1 2 4             growth rate
            AvgPool 2x2), then d dense layers
mobilenet   first block stride 2, inverted    expansion: 1 2 3 4 6                        block output
            residuals (ReLU6, depthwise k x k)
=========== ================================ =========================================== ==================

``k`` is 3, 5 or 7 (default 3): the spatial kernel of every conv of the stage
(for inception: of the large branch). Parameters a style does not use are
dropped, so equal networks get equal architecture ids. ``res``: 32..1024
pixels (pools round down, strided convs up). The sampler keeps res 224 and draws, per stage, a style,
depth, width (log-uniform in 8..160 x 2^stage), kernel, ratio and group
width, redrawing the rare configs over 150 M weights; FLOPs at batch 1 span
about 3e7..1e11 (median about 1.5e9).
Shapes: input (B, 3, res, res) float32 -> logits (B, classes).
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch
from torch import nn

from training.zoo.densenet import DenseBlock, Transition
from training.zoo.errors import SpecError
from training.zoo.family import (
    Family,
    Param,
    classes_param,
    image_io,
    make_divisible,
    pick,
    res_param,
)
from training.zoo.googlenet import Inception
from training.zoo.layers import ClassifierHead, ConvBNAct, InvertedResidual
from training.zoo.resnet import BasicBlock, Bottleneck

#: style -> (allowed ratios or None, default ratio, sampled depths)
STYLES: dict[str, tuple[tuple[float, ...] | None, float | None, tuple[int, ...]]] = {
    "vgg": (None, None, (1, 2, 3, 4)),
    "inception": ((0.25, 0.5, 0.75, 1.0), 0.5, (1, 2, 3, 4)),
    "resnet": ((0.25, 0.5, 1.0), 1.0, (1, 2, 3, 4, 5, 6)),
    "resnext": ((0.25, 0.5, 1.0), 0.5, (1, 2, 3, 4, 5, 6)),
    "densenet": ((1.0, 2.0, 4.0), 4.0, (2, 4, 6, 8, 12, 16)),
    "mobilenet": ((1.0, 2.0, 3.0, 4.0, 6.0), 6.0, (1, 2, 3, 4, 5, 6)),
}
KERNELS = (3, 5, 7)
GROUP_WIDTHS = (4, 8, 16, 32, 64)
STAGES = 4
MAX_SAMPLED_PARAMS = 150_000_000
FIELDS = {"d": "depth", "w": "width", "k": "kernel", "r": "ratio", "g": "group"}


def _stage_error(value: Any, why: str) -> SpecError:
    return SpecError(
        f"bad perfseer stage {value!r}: {why}; expected STYLE-dDEPTH-wWIDTH[-kKERNEL][-rRATIO][-gGROUP] "
        f"with STYLE one of {', '.join(STYLES)}, e.g. resnext-d2-w256-k3-r0.5-g16"
    )


def coerce_stage(value: Any) -> dict:
    """Stage token text or dict -> canonical dict (unused fields dropped, defaults filled)."""
    if isinstance(value, str):
        parts = value.strip().split("-")
        raw: dict[str, Any] = {"style": parts[0]}
        for part in parts[1:]:
            if not part or part[0] not in FIELDS:
                raise _stage_error(value, f"unknown field '{part}' (fields: d, w, k, r, g)")
            if FIELDS[part[0]] in raw:
                raise _stage_error(value, f"field '{part[0]}' given twice")
            raw[FIELDS[part[0]]] = part[1:]
    elif isinstance(value, dict):
        raw = dict(value)
    else:
        raise _stage_error(value, "not a string or object")
    style = raw.get("style")
    if style not in STYLES:
        raise _stage_error(value, f"unknown style '{style}'")
    unknown = set(raw) - {"style", *FIELDS.values()}
    if unknown:
        raise _stage_error(value, f"unknown key(s) {sorted(unknown)}")
    ratios, default_ratio, _ = STYLES[style]

    def num(key: str, cast, default=None):
        if key not in raw:
            if default is None:
                raise _stage_error(value, f"missing field '{key}'")
            return default
        try:
            v = cast(raw[key])
            if cast is int and isinstance(raw[key], float) and not raw[key].is_integer():
                raise ValueError
            return v
        except (TypeError, ValueError):
            raise _stage_error(value, f"bad {key} {raw[key]!r}") from None

    out: dict[str, Any] = {"style": style, "depth": num("depth", int, 2), "width": num("width", int)}
    out["kernel"] = num("kernel", int, 3)
    if not 1 <= out["depth"] <= 64:
        raise _stage_error(value, f"depth {out['depth']} not in 1..64")
    unit = 4 if style == "densenet" else 8
    if not (unit <= out["width"] <= 4096 and out["width"] % unit == 0):
        raise _stage_error(value, f"width {out['width']} not a multiple of {unit} in {unit}..4096")
    if out["kernel"] not in KERNELS:
        raise _stage_error(value, f"kernel {out['kernel']} not one of 3, 5, 7")
    if ratios is not None:
        out["ratio"] = float(num("ratio", float, default_ratio))
        if out["ratio"] not in ratios:
            raise _stage_error(value, f"ratio {out['ratio']} not one of {', '.join(f'{r:g}' for r in ratios)} "
                                      f"for style {style}")
    elif "ratio" in raw:
        pass  # vgg has no ratio: dropped
    if style == "resnext":
        out["group"] = num("group", int, 8)
        if out["group"] not in GROUP_WIDTHS:
            raise _stage_error(value, f"group width {out['group']} not one of "
                                      + ", ".join(map(str, GROUP_WIDTHS)))
    return out


def format_stage(stage: dict) -> str:
    """Canonical stage dict -> token text (inverse of :func:`coerce_stage`)."""
    text = f"{stage['style']}-d{stage['depth']}-w{stage['width']}-k{stage['kernel']}"
    if "ratio" in stage:
        text += f"-r{stage['ratio']:g}"
    if "group" in stage:
        text += f"-g{stage['group']}"
    return text


def build_stage(c_in: int, s: dict) -> tuple[nn.Module, int]:
    """The stage module (first op halves H and W) and its output channels."""
    style, d, w, k = s["style"], s["depth"], s["width"], s["kernel"]
    r: float = s.get("ratio", math.nan)  # vgg stages have no ratio (and use none)
    layers: list[nn.Module] = []
    if style == "vgg":
        layers.append(nn.MaxPool2d(2, 2))
        for _ in range(d):
            layers.append(ConvBNAct(c_in, w, k))
            c_in = w
    elif style == "inception":
        layers.append(nn.MaxPool2d(3, 2, 1))
        b1, b3, bk = w // 4, w // 2, w // 8
        bp = w - b1 - b3 - bk
        for _ in range(d):
            module = Inception(c_in, b1, make_divisible(b3 * r, 4), b3, make_divisible(bk * r, 4), bk, bp, k)
            layers.append(module)
            c_in = module.c_out
    elif style == "resnet":
        for i in range(d):
            stride = 2 if i == 0 else 1
            if r == 1.0:
                layers.append(BasicBlock(c_in, w, stride, k))
            else:
                layers.append(Bottleneck(c_in, make_divisible(w * r), w, stride, 1, k))
            c_in = w
    elif style == "resnext":
        g = s["group"]
        mid = max(g, round(w * r / g) * g)
        for i in range(d):
            layers.append(Bottleneck(c_in, mid, w, 2 if i == 0 else 1, mid // g, k))
            c_in = w
    elif style == "densenet":
        c_t = max(8, c_in // 2)
        layers.append(Transition(c_in, c_t))
        block = DenseBlock(c_t, d, w, int(w * r), k)
        layers.append(block)
        c_in = block.c_out
    elif style == "mobilenet":
        for i in range(d):
            layers.append(InvertedResidual(c_in, w, k, 2 if i == 0 else 1, int(c_in * r), "relu6"))
            c_in = w
    else:  # pragma: no cover - coerce_stage rejects unknown styles
        raise ValueError(style)
    return nn.Sequential(*layers), c_in


class PerfSeerNet(nn.Module):
    """Stem conv3x3/s2 -> four styled stages -> GAP + FC."""

    def __init__(self, stem: int, stages: list[dict], classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [ConvBNAct(3, stem, 3, 2)]
        c = stem
        for s in stages:
            stage, c = build_stage(c, s)
            layers.append(stage)
        self.features = nn.Sequential(*layers)
        self.head = ClassifierHead(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _log_width(rng: random.Random, lo: int, hi: int, unit: int) -> int:
    """Width drawn log-uniformly in [lo, hi], rounded to a multiple of ``unit``."""
    value = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return max(unit, round(value / unit) * unit)


def sample_stage(rng: random.Random, index: int) -> dict:
    """One random stage for stage ``index`` (0..3); widths double per stage."""
    style = pick(rng, tuple(STYLES))
    ratios, _, depths = STYLES[style]
    stage: dict[str, Any] = {"style": style, "depth": pick(rng, depths), "kernel": pick(rng, KERNELS)}
    if style == "densenet":
        stage["width"] = pick(rng, (8, 12, 16, 24, 32, 48, 64))
    else:
        stage["width"] = _log_width(rng, 8 * 2**index, 160 * 2**index, 8)
    if ratios is not None:
        stage["ratio"] = pick(rng, ratios)
    if style == "resnext":
        stage["group"] = pick(rng, GROUP_WIDTHS)
    return stage


def count_params(params: dict) -> int:
    """Number of weights of a normalized config (built on the meta device: no memory, no compute)."""
    with torch.device("meta"):
        model = FAMILY.build(params)
    return sum(p.numel() for p in model.parameters())


def _sample(rng: random.Random) -> dict:
    while True:  # redraw the rare giants so every sample exports to a < 2 GB protobuf
        raw = {f"s{i + 1}": sample_stage(rng, i) for i in range(STAGES)}
        if count_params(FAMILY.normalize(raw)) <= MAX_SAMPLED_PARAMS:
            return raw


DEFAULT_STAGES = ("resnet-d2-w64-k3-r1", "resnet-d2-w128-k3-r1", "resnet-d2-w256-k3-r1", "resnet-d2-w512-k3-r1")

FAMILY = Family(
    name="perfseer",
    doc=__doc__,
    params=(
        res_param(),
        Param("stem", "int", 32, "stem conv channels", lo=8, hi=256, multiple_of=8, in_spec=False),
        *(Param(f"s{i + 1}", "custom", DEFAULT_STAGES[i], f"stage {i + 1} (STYLE-dD-wW-kK-rR-gG)",
                coerce_fn=coerce_stage, fmt_fn=format_stage) for i in range(STAGES)),
        classes_param(),
    ),
    build=lambda p: PerfSeerNet(p["stem"], [p[f"s{i + 1}"] for i in range(STAGES)], p["classes"]),
    sample=_sample,
    io=image_io(),
)
