"""Small building blocks shared by the convolutional families.

All tensors are NCHW float32. Convolutions use "same" padding ``k // 2`` and
no bias (a BatchNorm follows; the ONNX exporter folds it into the conv).
"""

from __future__ import annotations

import torch
from torch import nn

_ACTS = {
    "relu": lambda: nn.ReLU(inplace=False),
    "relu6": lambda: nn.ReLU6(inplace=False),
    "hswish": lambda: nn.Hardswish(),
    "silu": lambda: nn.SiLU(),
    "hsigmoid": lambda: nn.Hardsigmoid(),
    "sigmoid": lambda: nn.Sigmoid(),
}


def act(name: str | None) -> nn.Module:
    """Activation module by name (``None`` -> identity)."""
    return nn.Identity() if name is None else _ACTS[name]()


class ConvBNAct(nn.Sequential):
    """Conv2d(k, stride, groups, no bias) -> BatchNorm2d -> activation.

    Shapes: (B, c_in, H, W) -> (B, c_out, ceil(H / stride), ceil(W / stride)).
    """

    def __init__(self, c_in: int, c_out: int, k: int = 3, stride: int = 1, groups: int = 1,
                 activation: str | None = "relu") -> None:
        super().__init__(
            nn.Conv2d(c_in, c_out, k, stride, k // 2, groups=groups, bias=False),
            nn.BatchNorm2d(c_out),
            act(activation),
        )


class SqueezeExcite(nn.Module):
    """Squeeze-and-excitation: x * gate(fc2(act(fc1(GAP(x))))), 1x1 convs as the FCs.

    Shapes: (B, C, H, W) -> (B, C, H, W).
    """

    def __init__(self, channels: int, squeeze: int, activation: str = "relu",
                 gate: str = "sigmoid") -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.act = act(activation)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.gate = act(gate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.fc2(self.act(self.fc1(self.pool(x)))))


class InvertedResidual(nn.Module):
    """MobileNetV2/V3 / EfficientNet MBConv block.

    1x1 expand (skipped when ``expand_ch == c_in``) -> k x k depthwise (stride)
    -> optional squeeze-excite -> 1x1 linear projection; identity shortcut when
    stride is 1 and c_in == c_out.

    Shapes: (B, c_in, H, W) -> (B, c_out, ceil(H / stride), ceil(W / stride)).
    """

    def __init__(self, c_in: int, c_out: int, k: int, stride: int, expand_ch: int,
                 activation: str = "relu6", se_ch: int = 0, se_act: str = "relu",
                 se_gate: str = "sigmoid") -> None:
        super().__init__()
        layers: list[nn.Module] = []
        if expand_ch != c_in:
            layers.append(ConvBNAct(c_in, expand_ch, 1, activation=activation))
        layers.append(ConvBNAct(expand_ch, expand_ch, k, stride, groups=expand_ch, activation=activation))
        if se_ch:
            layers.append(SqueezeExcite(expand_ch, se_ch, se_act, se_gate))
        layers.append(ConvBNAct(expand_ch, c_out, 1, activation=None))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class ClassifierHead(nn.Sequential):
    """Global average pooling -> flatten -> Linear: (B, C, H, W) -> (B, classes)."""

    def __init__(self, channels: int, classes: int) -> None:
        super().__init__(nn.AdaptiveAvgPool2d(1), nn.Flatten(1), nn.Linear(channels, classes))
