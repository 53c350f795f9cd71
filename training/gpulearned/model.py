"""The learned layer (SeerNet's readout on a kernel graph without message
passing): a small MLP maps each kernel's features (:mod:`perfseer_rt.gpu.learned_features`)
to ``g = log(kernel ms / roofline ms)``; a step is

    G = sum_k roof_k * exp(g_k) * count_k + c * launches,    H = s * host,
    T = (G^p + H^p)^(1/p)

with ``c`` (ms per launch) and ``s`` (host scale) learned too
(:mod:`perfseer_rt.gpu.step` states ``p``). Shapes: features ``[K, F]``,
``roof``/``count`` ``[K]``, ``seg`` ``[K]`` (the step each kernel belongs
to), ``launches``/``host`` ``[S]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from perfseer_rt.gpu.step import SMOOTH_P


@dataclass
class LayerConfig:
    hidden: int = 64
    layers: int = 2
    #: bound on |g|: a kernel is at most e^bound off its roofline either way
    bound: float = 5.0


class KernelMLP(nn.Module):
    """``features [K, F] -> g [K]`` with standardisation inside."""

    def __init__(self, n_features: int, cfg: LayerConfig, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.cfg = cfg
        self.mean: torch.Tensor
        self.std: torch.Tensor
        self.register_buffer("mean", mean.float())
        self.register_buffer("std", std.float().clamp_min(1e-3))
        dims = [n_features] + [cfg.hidden] * cfg.layers
        mods: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            mods += [nn.Linear(a, b), nn.SiLU()]
        mods.append(nn.Linear(dims[-1], 1))
        self.net = nn.Sequential(*mods)
        last = mods[-1]
        assert isinstance(last, nn.Linear)
        nn.init.zeros_(last.weight)
        nn.init.constant_(last.bias, 1.0)  # start at e^1 x roofline

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = (x - self.mean) / self.std
        return self.cfg.bound * torch.tanh(self.net(z).squeeze(-1) / self.cfg.bound)


class StepModel(nn.Module):
    """The kernel MLP plus the launch cost and host scale (logs);
    ``columns``: the kernel-data columns the MLP reads, in order."""

    def __init__(self, mlp: KernelMLP, columns: list[int]) -> None:
        super().__init__()
        self.mlp = mlp
        self.columns = list(columns)
        self.log_launch_ms = nn.Parameter(torch.tensor(float(torch.log(torch.tensor(0.003))), dtype=torch.float64))
        self.log_host_scale = nn.Parameter(torch.tensor(0.0, dtype=torch.float64))

    def step_ms(self, x: torch.Tensor, roof: torch.Tensor, count: torch.Tensor, seg: torch.Tensor,
                launches: torch.Tensor, host: torch.Tensor) -> torch.Tensor:
        """Step ms per label (the MLP in float32, the sums in float64)."""
        g = self.mlp(x).double()
        per = roof * torch.exp(g) * count
        gpu = torch.zeros_like(launches).index_add(0, seg, per) + torch.exp(self.log_launch_ms) * launches
        h = torch.exp(self.log_host_scale) * host
        return (gpu ** SMOOTH_P + h ** SMOOTH_P) ** (1.0 / SMOOTH_P)
