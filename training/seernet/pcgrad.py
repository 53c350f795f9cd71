r"""PCGrad: projecting conflicting gradients (Yu et al., "Gradient Surgery for
Multi-Task Learning", NeurIPS 2020), as SeerNet-Multi uses it (paper 001).

For task gradients :math:`g_1..g_T` on the shared parameters, each task's
gradient is projected against every other task's *original* gradient, in a
random order, whenever they conflict (negative inner product):

.. math::
    g_i^{PC} \leftarrow g_i^{PC} - \frac{g_i^{PC} \cdot g_j}{\|g_j\|^2} g_j
    \quad \text{if } g_i^{PC} \cdot g_j < 0,

and the update uses :math:`\sum_i g_i^{PC}`. Task-specific parameters (the
heads) get their plain gradients.
"""

from __future__ import annotations

import random
from typing import Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor, nn


@runtime_checkable
class MultiTask(Protocol):
    """A model PCGrad can train: its shared and its per-task parameters
    (:class:`~training.seernet.seernet_multi.SeerNetMulti`)."""

    def shared_parameters(self) -> list[nn.Parameter]: ...

    def task_parameters(self) -> list[nn.Parameter]: ...


def project_conflicting(grads: Sequence[Tensor], rng: random.Random | None = None) -> list[Tensor]:
    """PCGrad on flat per-task gradients ``[P]``; returns the projected ones."""
    rng = rng or random.Random(0)
    projected = []
    for i, g in enumerate(grads):
        g_pc = g.clone()
        others = [j for j in range(len(grads)) if j != i]
        rng.shuffle(others)
        for j in others:
            dot = torch.dot(g_pc, grads[j])
            if dot < 0:
                g_pc -= dot / grads[j].pow(2).sum().clamp_min(1e-20) * grads[j]
        projected.append(g_pc)
    return projected


def pcgrad_backward(losses: Sequence[Tensor], shared: Sequence[nn.Parameter],
                    task_specific: Sequence[nn.Parameter], rng: random.Random | None = None) -> None:
    """Fill ``.grad`` of ``shared`` with the PCGrad sum of the per-task
    gradients and of ``task_specific`` with the plain gradient of ``sum(losses)``."""
    shared = list(shared)
    flat = []
    for loss in losses:
        gs = torch.autograd.grad(loss, shared, retain_graph=True, allow_unused=True)
        flat.append(torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                               for g, p in zip(gs, shared)]))
    merged = torch.stack(project_conflicting(flat, rng)).sum(0)
    offset = 0
    for p in shared:
        n = p.numel()
        g = merged[offset:offset + n].view_as(p)
        p.grad = g.clone() if p.grad is None else p.grad + g
        offset += n
    if task_specific:
        torch.autograd.backward(torch.stack(list(losses)).sum(), inputs=list(task_specific))
