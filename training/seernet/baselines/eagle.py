"""Eagle baseline: the GCN latency predictor of BRP-NAS (Dudziak et al., 2020)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import GCNConv


class Eagle(nn.Module):
    r"""Eagle / the BRP-NAS GCN predictor (Dudziak et al., NeurIPS 2020), in
    the "Eagle-s" form of paper 001: PerfSeer node features instead of op
    one-hots. A global node is added to every graph and every node gets an
    edge into it; four GCN layers (Kipf & Welling, 2017) run over the graph
    and the global node's final embedding is read out by a linear layer:

    .. math::
        H^{(l+1)} = \mathrm{ReLU}\big(\hat{D}^{-1/2} \hat{A} \hat{D}^{-1/2} H^{(l)} W^{(l)}\big),
        \quad \hat{y} = W_o\,\mathbf{h}^{(4)}_{global}.

    The global node's input is zeros plus an indicator column. BRP-NAS used
    600 hidden units; the width defaults to 256 here (as every baseline).

    Args:
        node_dim (int), num_outputs (int), hidden (int): default ``256``,
        num_layers (int): default ``4``, dropout (float): default ``0.2``.

    Shapes:
        - **input:** as SeerNet (``edge_attr`` and ``u`` are unused but for
          the graph count).
        - **output:** ``[G, num_outputs]``.
    """

    def __init__(self, node_dim: int, num_outputs: int = 1, hidden: int = 256, num_layers: int = 4,
                 dropout: float = 0.2):
        super().__init__()
        dims = [node_dim + 1] + [hidden] * num_layers
        self.convs = nn.ModuleList(GCNConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden, num_outputs)

    def reset_parameters(self) -> None:
        for conv in self.convs:
            conv.reset_parameters()  # type: ignore[operator]  # a torch_geometric conv; nn.ModuleList yields plain Modules
        self.out.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, u: Tensor,
                node_batch: Tensor) -> Tensor:
        n, g = x.shape[0], u.shape[0]
        glob_ids = torch.arange(n, n + g, device=x.device)
        h = torch.cat([torch.cat([x, x.new_zeros(n, 1)], dim=1),
                       torch.cat([x.new_zeros(g, x.shape[1]), x.new_ones(g, 1)], dim=1)])
        to_glob = torch.stack([torch.arange(n, device=x.device), glob_ids[node_batch]])
        ei = torch.cat([edge_index, to_glob], dim=1)
        for conv in self.convs:
            h = self.dropout(torch.relu(conv(h, ei)))
        return self.out(h[n:])
