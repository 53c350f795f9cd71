"""Vision Transformer (Dosovitskiy et al., 2021, "An Image is Worth 16x16 Words").

Spec: ``vit:depth=12,dim=768,heads=12,patch=16,res=224`` with

- ``depth``: encoder blocks (1..48),
- ``dim``: embedding width (32..4096, multiple of 8 and of ``heads``),
- ``heads``: attention heads (1..64),
- ``patch``: patch size in pixels (4, 8, 14, 16, 32); ``res`` must be a multiple,
- ``res``: input resolution in pixels (32..1024),
- ``mlp``: MLP hidden width / dim (default 4.0),
- ``classes``: output classes (default 1000).

Patch embedding is a conv (kernel = stride = patch); a class token is
prepended and learned position embeddings added; pre-LN blocks; final LN;
linear head on the class token.
Shapes: input (B, 3, res, res) float32 -> logits (B, classes).
"""

from __future__ import annotations

import random

import torch
from torch import nn

from training.zoo.attention import Block
from training.zoo.errors import SpecError
from training.zoo.family import Family, Param, classes_param, image_io, pick, res_param


class ViT(nn.Module):
    """Patch embed -> [cls] + position embeddings -> ``depth`` blocks -> LN -> head(cls)."""

    def __init__(self, depth: int, dim: int, heads: int, patch: int, res: int, mlp: float,
                 classes: int) -> None:
        super().__init__()
        tokens = (res // patch) ** 2 + 1
        self.dim = dim
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.empty(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.empty(1, tokens, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, tokens, mlp) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # B, P, dim
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def check_heads(p: dict, family: str) -> dict:
    """``dim`` must be divisible by ``heads``."""
    if p["dim"] % p["heads"]:
        raise SpecError(f"{family}: dim={p['dim']} is not divisible by heads={p['heads']}; "
                        "choose heads dividing dim (e.g. dim / 64)")
    return p


def _check(p: dict) -> dict:
    if p["res"] % p["patch"]:
        raise SpecError(f"vit: res={p['res']} is not a multiple of patch={p['patch']}")
    return check_heads(p, "vit")


def _sample(rng: random.Random) -> dict:
    dim = pick(rng, (192, 256, 384, 512, 768, 1024))
    patch = pick(rng, (8, 14, 16, 32))
    return {
        "depth": rng.randint(2, 16),
        "dim": dim,
        "heads": dim // pick(rng, (32, 64)),
        "patch": patch,
        "res": patch * pick(rng, {8: (8, 12, 14), 14: (8, 12, 16), 16: (8, 12, 14, 16), 32: (7, 10, 12)}[patch]),
        "mlp": pick(rng, (2.0, 3.0, 4.0)),
    }


def dim_params(dim: int, heads: int, depth: int) -> tuple[Param, Param, Param]:
    """The depth/dim/heads parameters shared by the transformer families."""
    return (
        Param("depth", "int", depth, "number of blocks", lo=1, hi=48),
        Param("dim", "int", dim, "embedding width", lo=32, hi=4096, multiple_of=8),
        Param("heads", "int", heads, "attention heads (must divide dim)", lo=1, hi=64),
    )


FAMILY = Family(
    name="vit",
    doc=__doc__,
    params=(
        *dim_params(768, 12, 12),
        Param("patch", "int", 16, "patch size in pixels", choices=(4, 8, 14, 16, 32)),
        res_param(),
        Param("mlp", "float", 4.0, "MLP hidden width / dim", lo=0.5, hi=8.0, in_spec=False),
        classes_param(),
    ),
    build=lambda p: ViT(p["depth"], p["dim"], p["heads"], p["patch"], p["res"], p["mlp"], p["classes"]),
    sample=_sample,
    io=image_io(),
    check=_check,
)
