"""MLP-Node baseline (paper 001, section 4.3)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from training.seernet.mlp import MLP
from training.seernet.scatter import scatter_count


class MLPNode(nn.Module):
    r"""MLP-Node from paper 001 (section 4.3): the features of all nodes,
    in the extractor's (topological) order, are concatenated into one vector,
    zero-padded or truncated to ``max_nodes`` nodes, and fed to an MLP:

    .. math::
        \hat{y} = \mathrm{MLP}(\mathbf{v}_1 \| \dots \| \mathbf{v}_K), \quad K = \text{max\_nodes}.

    As in the paper it sees node features only (no edges, no global
    features); nodes past ``max_nodes`` are dropped.

    Args:
        node_dim (int): ``Fn``.
        max_nodes (int): ``K``.
        num_outputs (int): metrics.
        hidden (int): MLP width (default ``256``).
        num_layers (int): linear layers (default ``3``).

    Shapes:
        - **input:** as SeerNet (only ``x``, ``u`` and ``node_batch`` are used).
        - **output:** ``[G, num_outputs]``.
    """

    def __init__(self, node_dim: int, max_nodes: int, num_outputs: int = 1, hidden: int = 256,
                 num_layers: int = 3):
        super().__init__()
        self.node_dim, self.max_nodes, self.num_outputs = node_dim, max_nodes, num_outputs
        self.mlp = MLP([node_dim * max_nodes] + [hidden] * (num_layers - 1) + [num_outputs],
                       plain_last=True)

    def reset_parameters(self) -> None:
        self.mlp.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, u: Tensor,
                node_batch: Tensor) -> Tensor:
        num_graphs = u.shape[0]
        counts = scatter_count(node_batch, num_graphs).view(-1).long()
        starts = counts.cumsum(0) - counts
        pos = torch.arange(x.shape[0], device=x.device) - starts[node_batch]
        keep = pos < self.max_nodes
        dense = x.new_zeros((num_graphs, self.max_nodes, self.node_dim))
        dense[node_batch[keep], pos[keep]] = x[keep]
        return self.mlp(dense.view(num_graphs, -1))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(node_dim={self.node_dim}, max_nodes={self.max_nodes})"

