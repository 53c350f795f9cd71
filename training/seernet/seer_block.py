"""SeerBlock, the graph network block of SeerNet (paper 001, section 3.2)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from training.seernet.mlp import MLP
from training.seernet.scatter import scatter_mean
from training.seernet.softmax_aggr import SoftmaxAggregation
from training.seernet.synmm import SynMM


class SeerBlock(nn.Module):
    r"""SeerBlock from "PerfSeer: An Efficient and Accurate Deep Learning
    Models Performance Predictor" (paper 001, eq. 1-8), after the graph
    network block of Battaglia et al. (2018):

    .. math::
        \mathbf{e}'_j &= \mathrm{MLP}_e(\mathbf{e}_j \,\|\, \mathbf{v}_{s_j}
                         \,\|\, \mathbf{v}_{t_j})                         && (2)\\
        \bar{\mathbf{e}}'_i &= \mathrm{mean}_{j: t_j = i}\ \mathbf{e}'_j
                         \quad (\mathbf{0} \text{ without incoming edges}) && (3)\\
        \mathbf{v}'_i &= \mathrm{MLP}_v(\bar{\mathbf{e}}'_i \,\|\,
                         (\mathbf{v}_i + \mathbf{z}) \,\|\, \mathbf{u})     && (4)\\
        \bar{\mathbf{v}}'_z &= \mathrm{softmax\_aggr}(V')                 && (5)\\
        \mathbf{z}' &= \mathrm{MLP}_z(\bar{\mathbf{v}}'_z + W_z \mathbf{z}) && (6)\\
        \bar{\mathbf{v}}'_u &= \mathrm{SynMM}(V')                         && (7)\\
        \mathbf{u}' &= \mathrm{MLP}_u(\bar{\mathbf{v}}'_u \,\|\, \mathbf{z}'
                       \,\|\, \mathbf{u})                                 && (8)

    ``MLP_e``, ``MLP_v`` and ``MLP_u`` are one ``Linear + ReLU`` layer of
    ``hidden`` units, ``MLP_z`` two such layers, as in the paper.

    The global node ``z`` (GNPB) enters eq. 4 as ``v + z``, so ``z`` lives in
    the input node-feature space (``node_dim``): SeerNet initialises it by
    softmax aggregation of the input node features. Eq. 6 adds ``z`` to the
    aggregated *updated* nodes, which have ``hidden`` channels; the paper does
    not say how the sizes meet, so we map ``z`` with a bias-free linear
    projection ``W_z`` (``node_dim -> hidden``) there. That is the only
    addition to the paper's equations.

    Args:
        node_dim (int): node features ``Fn``.
        edge_dim (int): edge features ``Fe``.
        global_dim (int): global features ``Fg``.
        hidden (int): width of every MLP (default ``256``).
        dropout (float): dropout after each MLP activation (default ``0``,
            as in the paper).

    Shapes:
        - **input:** x ``[N, Fn]``, edge_index ``int64[2, E]``,
          edge_attr ``[E, Fe]``, u ``[G, Fg]``, z ``[G, Fn]``,
          node_batch ``int64[N]``.
        - **output:** ``(v' [N, hidden], e' [E, hidden], z' [G, hidden],
          u' [G, hidden])``.
    """

    def __init__(self, node_dim: int, edge_dim: int, global_dim: int, hidden: int = 256,
                 dropout: float = 0.0):
        super().__init__()
        self.node_dim, self.edge_dim, self.global_dim, self.hidden = node_dim, edge_dim, global_dim, hidden
        self.mlp_e = MLP([edge_dim + 2 * node_dim, hidden], dropout=dropout)
        self.mlp_v = MLP([hidden + node_dim + global_dim, hidden], dropout=dropout)
        self.aggr_z = SoftmaxAggregation()
        self.z_proj = nn.Linear(node_dim, hidden, bias=False)
        self.mlp_z = MLP([hidden, hidden, hidden], dropout=dropout)
        self.aggr_u = SynMM(hidden)
        self.mlp_u = MLP([2 * hidden + global_dim, hidden], dropout=dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in (self.mlp_e, self.mlp_v, self.aggr_z, self.z_proj, self.mlp_z, self.aggr_u, self.mlp_u):
            m.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, u: Tensor, z: Tensor,
                node_batch: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        num_nodes, num_graphs = x.shape[0], u.shape[0]
        src, dst = edge_index[0], edge_index[1]
        # (2) edge update, (3) mean of incoming edges per node
        e = self.mlp_e(torch.cat([edge_attr, x.index_select(0, src), x.index_select(0, dst)], dim=-1))
        e_bar = scatter_mean(e, dst, num_nodes)
        # (4) node update with the global node and the global features
        v = self.mlp_v(torch.cat([e_bar, x + z.index_select(0, node_batch),
                                  u.index_select(0, node_batch)], dim=-1))
        # (5)-(6) global node update
        z_new = self.mlp_z(self.aggr_z(v, node_batch, num_graphs) + self.z_proj(z))
        # (7)-(8) global feature update
        u_new = self.mlp_u(torch.cat([self.aggr_u(v, node_batch, num_graphs), z_new, u], dim=-1))
        return v, e, z_new, u_new

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(node_dim={self.node_dim}, edge_dim={self.edge_dim}, "
                f"global_dim={self.global_dim}, hidden={self.hidden})")

