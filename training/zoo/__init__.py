"""Deterministic model zoo: config -> torch.nn.Module -> ONNX.

Quick use::

    from training.zoo import parse_spec, export_onnx
    cfg = parse_spec("resnet:depth=50,width=1.0,res=224")
    cfg.arch_id                      # stable 16-hex architecture id
    export_onnx(cfg, "r50.onnx")     # dynamic batch axis "batch"

Families: perfseer (the PerfSeer random space), vgg, resnet, mobilenetv2,
mobilenetv3, densenet, efficientnet, googlenet, vit, bert, gpt, nb201.
See :mod:`training.zoo.spec` for the spec syntax and each family module for
its parameters. Command line: ``python -m training.zoo --help``.
"""

from __future__ import annotations

import random

from training.zoo.config import ModelConfig
from training.zoo.errors import SpecError
from training.zoo.export import (
    build_model,
    example_inputs,
    export_onnx,
    input_specs,
    output_specs,
)
from training.zoo.family import TensorSpec
from training.zoo.registry import family_names, get_family
from training.zoo.spec import parse_spec, to_spec


def sample(family: str, rng: random.Random) -> ModelConfig:
    """One random config of ``family`` drawn from ``rng`` (a ``random.Random``)."""
    fam = get_family(family)
    return ModelConfig(fam.name, fam.sample(rng))


def sample_many(family: str, n: int, seed: int = 0) -> list[ModelConfig]:
    """``n`` configs of ``family`` from ``random.Random(seed)``: same seed, same list."""
    rng = random.Random(seed)
    return [sample(family, rng) for _ in range(n)]


__all__ = [
    "ModelConfig",
    "SpecError",
    "TensorSpec",
    "build_model",
    "example_inputs",
    "export_onnx",
    "family_names",
    "get_family",
    "input_specs",
    "output_specs",
    "parse_spec",
    "sample",
    "sample_many",
    "to_spec",
]
