"""SeerNet: SeerBlock + a two-layer MLP head (paper 001, section 3.2)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from perfseer_rt.graph import layout
from training.seernet.mlp import MLP
from training.seernet.seer_block import SeerBlock
from training.seernet.softmax_aggr import SoftmaxAggregation


@dataclass
class SeerNetConfig:
    """Hyper-parameters of :class:`SeerNet` and :class:`SeerNetMulti`."""

    node_dim: int = len(layout.NODE_COLUMNS)
    edge_dim: int = len(layout.EDGE_COLUMNS)
    global_dim: int = len(layout.GLOBAL_COLUMNS)
    hidden: int = 256      # width of every MLP, as in the paper
    num_outputs: int = 1   # metrics predicted (standardized log space)
    dropout: float = 0.0   # after every hidden activation (not in the paper; 0 = off)
    drop_op_onehot: bool = True  # ignore the op-type one-hot columns, as paper 001 does

    def input_columns(self) -> list[int]:
        """Indices of the node columns the model reads."""
        if not self.drop_op_onehot:
            return list(range(self.node_dim))
        if self.node_dim != len(layout.NODE_COLUMNS):
            raise ValueError(f"drop_op_onehot needs the full node layout ({len(layout.NODE_COLUMNS)} "
                             f"columns), got node_dim={self.node_dim}; set drop_op_onehot=False")
        return [i for i, c in enumerate(layout.NODE_COLUMNS) if not c.startswith("op_")]

    def to_dict(self) -> dict:
        return asdict(self)


class SeerNet(nn.Module):
    r"""SeerNet from "PerfSeer" (paper 001): GNPB initialises the global node
    by softmax aggregation of the input node features, one
    :class:`~training.seernet.seer_block.SeerBlock` turns the PerfGraph into
    a graph embedding ``u'``, and a two-layer MLP head maps it to the metrics:

    .. math::
        \mathbf{z}_0 = \mathrm{softmax\_aggr}(V), \quad
        \mathbf{u}' = \mathrm{SeerBlock}(G, \mathbf{z}_0), \quad
        \hat{\mathbf{y}} = W_2\,\mathrm{ReLU}(W_1 \mathbf{u}' + b_1) + b_2.

    Inputs are normalized features and outputs standardized log metrics
    (:mod:`training.seernet.normalization`); the exported ONNX wraps both.

    Node categories: paper 001 (section 4.2, "Feature Selection") found that
    op-type one-hot features *reduce* SeerNet's accuracy and left them out.
    By default (``drop_op_onehot=True``) SeerNet reads every node column but
    the ``op_*`` one-hot block of the layout; the ONNX input keeps the full
    layout. On our synthetic check the one-hot block let the model memorise
    architectures (the set of op types present is a fingerprint, which the
    softmax aggregation of GNPB exposes): validation MSE 0.011 with it,
    0.0012 without, after 25 epochs.

    Args:
        config (SeerNetConfig): sizes; ``num_outputs`` metrics share one head
            (use one model per metric as in the paper, or
            :class:`SeerNetMulti`).

    Shapes:
        - **input:** x ``[N, Fn]``, edge_index ``int64[2, E]``,
          edge_attr ``[E, Fe]``, u ``[G, Fg]``, node_batch ``int64[N]``.
        - **output:** ``[G, num_outputs]``.
    """

    node_keep: Tensor  # buffer: the node columns read (all but the op one-hot by default)

    def __init__(self, config: SeerNetConfig):
        super().__init__()
        self.config = config
        keep = config.input_columns()
        self.register_buffer("node_keep", torch.tensor(keep, dtype=torch.long), persistent=False)
        self._select = len(keep) != config.node_dim
        self.gnpb_init = SoftmaxAggregation()
        self.block = SeerBlock(len(keep), config.edge_dim, config.global_dim, config.hidden,
                               config.dropout)
        self.head = self._make_heads()
        self.reset_parameters()

    def _make_heads(self) -> nn.Module:
        c = self.config
        return MLP([c.hidden, c.hidden, c.num_outputs], plain_last=True, dropout=c.dropout)

    def reset_parameters(self) -> None:
        self.gnpb_init.reset_parameters()
        self.block.reset_parameters()
        for m in self.head.modules():
            if isinstance(m, MLP):
                m.reset_parameters()

    def embed(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, u: Tensor,
              node_batch: Tensor) -> Tensor:
        """The graph embedding ``u'`` ``[G, hidden]``."""
        if self._select:
            x = x.index_select(1, self.node_keep)
        z = self.gnpb_init(x, node_batch, u.shape[0])
        return self.block(x, edge_index, edge_attr, u, z, node_batch)[3]

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, u: Tensor,
                node_batch: Tensor) -> Tensor:
        return self.head(self.embed(x, edge_index, edge_attr, u, node_batch))

    def __repr__(self) -> str:
        c = self.config
        return (f"{self.__class__.__name__}(node_dim={c.node_dim}, edge_dim={c.edge_dim}, "
                f"global_dim={c.global_dim}, hidden={c.hidden}, num_outputs={c.num_outputs})")


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class StackedPredictor(nn.Module):
    """Several single-metric models side by side: ``[G, sum of outputs]``.

    Used to ship one ONNX file holding the per-metric SeerNets.
    """

    def __init__(self, models: list[nn.Module]):
        super().__init__()
        self.models = nn.ModuleList(models)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, u: Tensor,
                node_batch: Tensor) -> Tensor:
        return torch.cat([m(x, edge_index, edge_attr, u, node_batch) for m in self.models], dim=-1)
