"""SynMM: Synergistic Max-Mean aggregation (paper 001, section 3.2, eq. 7)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from training.seernet.scatter import scatter_max, scatter_mean


class SynMM(nn.Module):
    r"""SynMM: Synergistic Max-Mean aggregation (paper 001, section 3.2, eq. 7).

    Node features are reduced per graph by max and by mean, then combined by a
    learned linear combination, one pair of coefficients per channel:

    .. math::
        \bar{v}_1 = \max_{i \in g} v_i, \quad
        \bar{v}_2 = \frac{1}{|g|} \sum_{i \in g} v_i, \quad
        \bar{v} = a \odot \bar{v}_1 + b \odot \bar{v}_2.

    ``a = 1, b = 0`` gives max aggregation and ``a = 0, b = 1`` mean; both
    start at 0.5. The paper says only "linear aggregation" of the two results;
    we read it as this per-channel weighted sum (the other reading, a full
    ``Linear(2C, C)`` over ``[max || mean]``, adds ``2C^2`` parameters in front
    of ``MLP_u``, whose first layer is linear already).

    Args:
        channels (int): feature size ``C``.

    Shapes:
        x ``[N, C]``, index ``int64[N]`` -> ``[G, C]``.
    """

    def __init__(self, channels: int):
        super().__init__()
        self.channels = channels
        self.weight = nn.Parameter(torch.empty(2, channels))  # rows: max, mean
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.weight, 0.5)

    def forward(self, x: Tensor, index: Tensor, dim_size: int) -> Tensor:
        v_max = scatter_max(x, index, dim_size)
        v_mean = scatter_mean(x, index, dim_size)
        return self.weight[0] * v_max + self.weight[1] * v_mean

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels})"
