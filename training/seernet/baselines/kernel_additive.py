"""nn-Meter-style kernel-additive baseline (Zhang et al., MobiSys 2021)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from training.seernet.mlp import MLP
from training.seernet.scatter import scatter_logsumexp


class KernelAdditive(nn.Module):
    r"""A kernel-additive predictor in the manner of nn-Meter: every node
    (kernel) gets a cost from a per-node MLP, and a model's metric is the sum
    of its kernels' costs. Kernel costs are positive, ``c_i = exp(f(v_i))``,
    and the sum is taken in log space:

    .. math::
        \log \hat{y} = \log \sum_{i \in g} \exp f(\mathbf{v}_i), \qquad
        \hat{t} = (\log \hat{y} - \mu) / \sigma,

    where ``mu``/``sigma`` are the target normalization, so the model is
    trained on graph totals with the same loss as SeerNet (there are no
    per-kernel labels). Unlike nn-Meter it has **no kernel-fusion detection**:
    each ONNX node is one kernel, and edges and global features are unused.
    The sum suits time and energy; it is a poor fit for peak memory or
    utilization, which do not add up over kernels.

    Args:
        node_dim (int), target_mean, target_std (sequences of ``num_outputs``
        floats: the log-target stats), hidden (int): default ``256``,
        init_nodes (float): typical node count, to start near the mean.

    Shapes:
        - **input:** as SeerNet; **output:** ``[G, num_outputs]``.
    """

    target_mean: Tensor  # buffers: the log-target stats
    target_std: Tensor

    def __init__(self, node_dim: int, target_mean: Sequence[float], target_std: Sequence[float],
                 hidden: int = 256, init_nodes: float = 100.0):
        super().__init__()
        self.num_outputs = len(target_mean)
        self.init_nodes = float(init_nodes)
        self.kernel = MLP([node_dim, hidden, hidden, self.num_outputs], plain_last=True)
        self.register_buffer("target_mean", torch.tensor(list(target_mean), dtype=torch.float32))
        self.register_buffer("target_std", torch.tensor(list(target_std), dtype=torch.float32))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.kernel.reset_parameters()
        last = self.kernel.net[-1]
        assert isinstance(last, nn.Linear)  # plain_last: the MLP ends in its Linear
        with torch.no_grad():  # start with sum of costs ~ the mean target
            last.bias.copy_(self.target_mean - torch.log(torch.tensor(max(self.init_nodes, 1.0))))

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, u: Tensor,
                node_batch: Tensor) -> Tensor:
        log_total = scatter_logsumexp(self.kernel(x), node_batch, u.shape[0])
        return (log_total - self.target_mean) / self.target_std
