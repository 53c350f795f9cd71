"""Scatter reductions over the rows of a 2-D tensor, in plain torch.

They lower to ONNX ``ScatterElements`` (reduction ``add`` / ``max``, opset 18)
and ``GatherElements``, so a model built on them exports without
torch_geometric or custom ops.

Shapes:
    src ``[K, C]``, index ``int64[K]`` with values in ``[0, dim_size)``
    -> ``[dim_size, C]``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _expand(index: Tensor, src: Tensor) -> Tensor:
    return index.view(-1, 1).expand(-1, src.shape[1])


def scatter_sum(src: Tensor, index: Tensor, dim_size: int) -> Tensor:
    """``out[i] = sum_{k: index[k] = i} src[k]`` (zero for empty groups)."""
    out = src.new_zeros((dim_size, src.shape[1]))
    return out.scatter_add(0, _expand(index, src), src)


def scatter_count(index: Tensor, dim_size: int, dtype=torch.float32) -> Tensor:
    """Group sizes ``[dim_size, 1]``."""
    ones = torch.ones((index.shape[0], 1), dtype=dtype, device=index.device)
    return scatter_sum(ones, index, dim_size)


def scatter_mean(src: Tensor, index: Tensor, dim_size: int) -> Tensor:
    """Mean per group; an empty group gives zeros."""
    total = scatter_sum(src, index, dim_size)
    return total / scatter_count(index, dim_size, src.dtype).clamp(min=1.0)


def scatter_max(src: Tensor, index: Tensor, dim_size: int) -> Tensor:
    """Max per group; an empty group gives ``-inf`` (callers never have one)."""
    out = torch.full((dim_size, src.shape[1]), float("-inf"), dtype=src.dtype, device=src.device)
    return out.scatter_reduce(0, _expand(index, src), src, reduce="amax", include_self=True)


def scatter_logsumexp(src: Tensor, index: Tensor, dim_size: int) -> Tensor:
    """``log(sum(exp(src)))`` per group, computed stably."""
    peak = scatter_max(src, index, dim_size).detach()
    shifted = torch.exp(src - peak.index_select(0, index))
    return torch.log(scatter_sum(shifted, index, dim_size)) + peak
