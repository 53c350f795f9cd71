"""Softmax aggregation: SeerNet's rho^{v->z} and GNPB's initialisation of z."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from training.seernet.scatter import scatter_max, scatter_sum


class SoftmaxAggregation(nn.Module):
    r"""Softmax aggregation (the ``rho^{v->z}`` of SeerNet and GNPB's init of ``z``).

    As PyG's ``SoftmaxAggregation(t=1, learn=False)`` (Li et al., "DeeperGCN",
    2020): per graph and per channel, a softmax over the nodes weights the nodes'
    own values,

    .. math::
        \bar{v}_{g,c} = \sum_{i \in g} \frac{\exp(t\,v_{i,c})}
                        {\sum_{j \in g} \exp(t\,v_{j,c})} v_{i,c}.

    It interpolates between mean (``t -> 0``) and max (``t -> inf``).

    Args:
        t (float): inverse temperature (default ``1.0``, as in PyG).
        learn (bool): make ``t`` a learned parameter (default ``False``).

    Shapes:
        x ``[N, C]``, index ``int64[N]`` (graph of each node) -> ``[G, C]``.
    """

    def __init__(self, t: float = 1.0, learn: bool = False):
        super().__init__()
        self.init_t = float(t)
        self.learn = learn
        if learn:
            self.t = nn.Parameter(torch.tensor(self.init_t))
        else:
            self.register_buffer("t", torch.tensor(self.init_t), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.t.fill_(self.init_t)

    def forward(self, x: Tensor, index: Tensor, dim_size: int) -> Tensor:
        logits = x * self.t
        peak = scatter_max(logits, index, dim_size).detach()  # stability only
        w = torch.exp(logits - peak.index_select(0, index))
        return scatter_sum(w * x, index, dim_size) / scatter_sum(w, index, dim_size)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(t={self.init_t}, learn={self.learn})"
