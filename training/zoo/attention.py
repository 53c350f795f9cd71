"""Transformer pieces shared by ViT, BERT and GPT (Vaswani et al., 2017).

Attention is written out (MatMul, Softmax) rather than calling
``scaled_dot_product_attention`` so the exported graph shows the real ops.
Token tensors are (B, N, dim) float32; the batch axis is always reshaped as
``-1`` so the export keeps a dynamic batch with constant shape tensors.
"""

from __future__ import annotations

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    """softmax(Q K^T / sqrt(d_head) [+ causal mask]) V over ``heads`` heads.

    Shapes: (B, N, dim) -> (B, N, dim); ``dim`` divisible by ``heads``.
    """

    def __init__(self, dim: int, heads: int, tokens: int, causal: bool = False) -> None:
        super().__init__()
        self.heads, self.tokens, self.causal = heads, tokens, causal
        self.head_dim = dim // heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``mask``: (N, N) bool, True where attention is blocked (causal models only)."""
        n, h, d = self.tokens, self.heads, self.head_dim
        qkv = self.qkv(x).reshape(-1, n, 3, h, d).permute(2, 0, 3, 1, 4)  # 3, B, h, N, d
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = (q @ k.transpose(-2, -1)) * self.scale  # B, h, N, N
        if self.causal:
            mask = causal_mask(n) if mask is None else mask
            scores = scores.masked_fill(mask, float("-inf"))
        out = scores.softmax(-1) @ v  # B, h, N, d
        return self.proj(out.transpose(1, 2).reshape(-1, n, h * d))


def causal_mask(n: int) -> torch.Tensor:
    """(n, n) bool, True above the diagonal (position i may not attend to j > i)."""
    return torch.ones(n, n, dtype=torch.bool).triu(1)


class MLP(nn.Sequential):
    """Linear(dim, hidden) -> GELU -> Linear(hidden, dim): (B, N, dim) -> (B, N, dim)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))


class Block(nn.Module):
    """Encoder/decoder block, pre-LN (ViT, GPT) or post-LN (BERT).

    pre:  x = x + Attn(LN(x)); x = x + MLP(LN(x))
    post: x = LN(x + Attn(x)); x = LN(x + MLP(x))
    Shapes: (B, N, dim) -> (B, N, dim).
    """

    def __init__(self, dim: int, heads: int, tokens: int, mlp_ratio: float, causal: bool = False,
                 pre_norm: bool = True) -> None:
        super().__init__()
        self.pre_norm = pre_norm
        self.ln1 = nn.LayerNorm(dim)
        self.attn = MultiHeadAttention(dim, heads, tokens, causal)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, round(dim * mlp_ratio))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.attn(self.ln1(x), mask)
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x, mask))
        return self.ln2(x + self.mlp(x))
