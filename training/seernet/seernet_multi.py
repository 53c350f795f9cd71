"""SeerNet-Multi: one shared SeerBlock, one head per metric (paper 001)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from training.seernet.mlp import MLP
from training.seernet.seernet import SeerNet, SeerNetConfig


class SeerNetMulti(SeerNet):
    r"""SeerNet-Multi from "PerfSeer" (paper 001, section 3.2): the GNPB init
    and the SeerBlock are shared by all metrics; metric ``m`` has its own
    two-layer head,

    .. math::
        \hat{y}_m = \mathrm{MLP}^{(m)}_{head}(\mathbf{u}'), \quad m = 1..M.

    Train it with PCGrad (:mod:`training.seernet.pcgrad`): the per-metric
    gradients on :meth:`shared_parameters` are projected when they conflict.

    Args:
        config (SeerNetConfig): ``num_outputs`` is the number of metrics ``M``.

    Shapes:
        same as :class:`~training.seernet.seernet.SeerNet`; output ``[G, M]``.
    """

    head: nn.ModuleList  # one head per metric (_make_heads)

    def _make_heads(self) -> nn.Module:
        c = self.config
        return nn.ModuleList(MLP([c.hidden, c.hidden, 1], plain_last=True, dropout=c.dropout)
                             for _ in range(c.num_outputs))

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, u: Tensor,
                node_batch: Tensor) -> Tensor:
        h = self.embed(x, edge_index, edge_attr, u, node_batch)
        return torch.cat([head(h) for head in self.head], dim=-1)

    def shared_parameters(self) -> list[nn.Parameter]:
        return [p for p in [*self.gnpb_init.parameters(), *self.block.parameters()] if p.requires_grad]

    def task_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.head.parameters() if p.requires_grad]


__all__ = ["SeerNetMulti", "SeerNetConfig"]
