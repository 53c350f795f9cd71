"""Token transformers: a BERT-style encoder and a GPT-style decoder.

BERT (Devlin et al., 2019): ``bert:depth=12,dim=768,heads=12,seq=128``
GPT (Radford et al., 2019):  ``gpt:depth=12,dim=768,heads=12,seq=1024``

Parameters (both):

- ``depth``: blocks (1..48); ``dim``: width (32..4096, multiple of 8 and of
  ``heads``); ``heads``: attention heads (1..64),
- ``seq``: sequence length in tokens (1..4096) -- part of the architecture,
- ``mlp``: MLP hidden width / dim (default 4.0),
- ``vocab``: vocabulary size (default 30522 for bert, 50257 for gpt).

Token embedding is an ``nn.Embedding`` (ONNX ``Gather`` on int64 ids) plus
learned position embeddings. BERT: embedding LayerNorm, post-LN blocks,
bidirectional attention; output ``last_hidden_state`` (B, seq, dim). GPT:
pre-LN blocks with a causal mask (upper triangle set to -inf before softmax),
final LN and an untied LM head; output ``logits`` (B, seq, vocab).
Inputs: ``input_ids`` (B, seq) int64 in [0, vocab).
"""

from __future__ import annotations

import random

import torch
from torch import nn

from training.zoo.attention import Block, causal_mask
from training.zoo.family import Family, Param, TensorSpec, pick
from training.zoo.vit import check_heads, dim_params


class Bert(nn.Module):
    """Embeddings (token + position) -> LN -> ``depth`` post-LN encoder blocks."""

    def __init__(self, depth: int, dim: int, heads: int, seq: int, mlp: float, vocab: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos_embed = nn.Parameter(torch.empty(1, seq, dim))
        self.norm = nn.LayerNorm(dim)
        self.blocks = nn.Sequential(*[Block(dim, heads, seq, mlp, pre_norm=False) for _ in range(depth)])

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.norm(self.tok(input_ids) + self.pos_embed))


class GPT(nn.Module):
    """Embeddings (token + position) -> ``depth`` causal pre-LN blocks -> LN -> LM head."""

    def __init__(self, depth: int, dim: int, heads: int, seq: int, mlp: float, vocab: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos_embed = nn.Parameter(torch.empty(1, seq, dim))
        self.blocks = nn.ModuleList([Block(dim, heads, seq, mlp, causal=True) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.seq = seq

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(input_ids) + self.pos_embed
        mask = causal_mask(self.seq)  # one constant shared by all blocks
        for block in self.blocks:
            x = block(x, mask)
        return self.lm_head(self.norm(x))


def _io(output: str):
    def io(p: dict, batch):
        width = p["dim"] if output == "last_hidden_state" else p["vocab"]
        return ([TensorSpec("input_ids", (batch, p["seq"]), "int64", high=p["vocab"])],
                [TensorSpec(output, (batch, p["seq"], width), "float32")])
    return io


def _params(dim: int, heads: int, depth: int, seq: int, vocab: int) -> tuple[Param, ...]:
    return (
        *dim_params(dim, heads, depth),
        Param("seq", "int", seq, "sequence length in tokens", lo=1, hi=4096),
        Param("mlp", "float", 4.0, "MLP hidden width / dim", lo=0.5, hi=8.0, in_spec=False),
        Param("vocab", "int", vocab, "vocabulary size", lo=2, hi=300000, in_spec=False),
    )


def _sampler(seqs: tuple[int, ...]):
    def sample(rng: random.Random) -> dict:
        dim = pick(rng, (128, 256, 384, 512, 768, 1024))
        return {"depth": rng.randint(2, 16), "dim": dim, "heads": dim // pick(rng, (32, 64)),
                "seq": pick(rng, seqs), "mlp": pick(rng, (2.0, 4.0))}
    return sample


def _build(cls):
    return lambda p: cls(p["depth"], p["dim"], p["heads"], p["seq"], p["mlp"], p["vocab"])


BERT_FAMILY = Family(
    name="bert", doc=__doc__, params=_params(768, 12, 12, 128, 30522), build=_build(Bert),
    sample=_sampler((32, 64, 128, 256, 384, 512)), io=_io("last_hidden_state"),
    check=lambda p: check_heads(p, "bert"),
)
GPT_FAMILY = Family(
    name="gpt", doc=__doc__, params=_params(768, 12, 12, 1024, 50257), build=_build(GPT),
    sample=_sampler((64, 128, 256, 512, 1024)), io=_io("logits"),
    check=lambda p: check_heads(p, "gpt"),
)
