"""A plain multi-layer perceptron, the building block of every SeerNet MLP."""

from __future__ import annotations

from typing import Sequence

from torch import Tensor, nn


class MLP(nn.Module):
    """A plain multi-layer perceptron: ``Linear -> ReLU`` per layer.

    ``MLP([in, 256])`` is the paper's "one layer with 256 hidden dimensions"
    (``Linear(in, 256) + ReLU``); ``MLP([256, 256, 1], plain_last=True)`` is a
    two-layer prediction head whose last layer has no activation.

    Args:
        channels (list[int]): ``[in, hidden..., out]``; ``len - 1`` layers.
        plain_last (bool): no activation (or dropout) after the last layer.
        dropout (float): dropout after each activation (default ``0``).

    Shapes:
        ``[*, channels[0]] -> [*, channels[-1]]``.
    """

    def __init__(self, channels: Sequence[int], plain_last: bool = False, dropout: float = 0.0):
        super().__init__()
        if len(channels) < 2:
            raise ValueError(f"MLP needs at least [in, out] channels, got {list(channels)}")
        self.channels = list(channels)
        self.plain_last = plain_last
        layers: list[nn.Module] = []
        for i, (c_in, c_out) in enumerate(zip(channels[:-1], channels[1:])):
            layers.append(nn.Linear(c_in, c_out))
            if not (plain_last and i == len(channels) - 2):
                layers.append(nn.ReLU())
                if dropout > 0:
                    layers.append(nn.Dropout(dropout))
        self.net = nn.Sequential(*layers)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in self.net:
            if isinstance(m, nn.Linear):
                m.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels})"
