"""PMGNS baseline: DIPPM's graph network (paper 002, section 3.4)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv, global_mean_pool

from training.seernet.mlp import MLP


class PMGNS(nn.Module):
    r"""PMGNS from "DIPPM: a Deep Learning Inference Performance Predictive
    Model using Graph Neural Networks" (paper 002): three GraphSAGE blocks
    (Hamilton et al., 2017) make node embeddings, which are pooled, joined
    with the static features ``F_s`` and passed through three FC blocks:

    .. math::
        \mathbf{h}_i^{(l+1)} = \mathrm{ReLU}\big(W_1^{(l)} \mathbf{h}_i^{(l)}
            + W_2^{(l)} \mathrm{mean}_{j \to i} \mathbf{h}_j^{(l)}\big), \quad
        \hat{y} = \mathrm{FC}_3\big(\mathrm{mean}_i\,\mathbf{h}_i^{(3)} \,\|\, F_s\big).

    ``F_s`` is our global-feature vector ``u`` (it holds DIPPM's total MACs,
    as FLOPs, and batch size; we have no per-type op counts there). DIPPM
    used 512 hidden units, dropout 0.05 and a Huber loss; here the width
    defaults to 256 and the loss is the common MSE so that all models share
    one training setting.

    Args:
        node_dim (int), global_dim (int), num_outputs (int),
        hidden (int): default ``256``; dropout (float): default ``0.05``.

    Shapes:
        - **input:** as SeerNet (``edge_attr`` unused).
        - **output:** ``[G, num_outputs]``.
    """

    def __init__(self, node_dim: int, global_dim: int, num_outputs: int = 1, hidden: int = 256,
                 dropout: float = 0.05):
        super().__init__()
        self.convs = nn.ModuleList([SAGEConv(node_dim, hidden), SAGEConv(hidden, hidden),
                                    SAGEConv(hidden, hidden)])
        self.dropout = nn.Dropout(dropout)
        self.fc = MLP([hidden + global_dim, hidden, hidden, num_outputs], plain_last=True,
                      dropout=dropout)

    def reset_parameters(self) -> None:
        for conv in self.convs:
            conv.reset_parameters()  # type: ignore[operator]  # a torch_geometric conv; nn.ModuleList yields plain Modules
        self.fc.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, u: Tensor,
                node_batch: Tensor) -> Tensor:
        h = x
        for conv in self.convs:
            h = self.dropout(torch.relu(conv(h, edge_index)))
        g = global_mean_pool(h, node_batch, size=u.shape[0])
        return self.fc(torch.cat([g, u], dim=-1))
