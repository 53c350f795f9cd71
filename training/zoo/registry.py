"""The registry of model families: plain data, one module per family."""

from __future__ import annotations

import importlib
from functools import cache

from training.zoo.errors import SpecError
from training.zoo.family import Family

#: family name -> module (under training.zoo) that defines ``FAMILY``.
FAMILY_MODULES: dict[str, str] = {
    "perfseer": "perfseer_space",
    "vgg": "vgg",
    "resnet": "resnet",
    "mobilenetv2": "mobilenetv2",
    "mobilenetv3": "mobilenetv3",
    "densenet": "densenet",
    "efficientnet": "efficientnet",
    "googlenet": "googlenet",
    "vit": "vit",
    "bert": "text_transformers",
    "gpt": "text_transformers",
    "nb201": "nb201",
    "hf": "real.hf_text",
    "timm": "real.timm_vision",
}


def family_names() -> list[str]:
    """All registered family names, sorted."""
    return sorted(FAMILY_MODULES)


@cache
def get_family(name: str) -> Family:
    """The :class:`Family` called ``name``; :class:`SpecError` listing the valid names otherwise."""
    if name not in FAMILY_MODULES:
        raise SpecError(f"unknown model family '{name}'; valid families: " + ", ".join(family_names()))
    module = importlib.import_module(f"training.zoo.{FAMILY_MODULES[name]}")
    fam = getattr(module, name.upper() + "_FAMILY", None) or module.FAMILY
    assert fam.name == name, (fam.name, name)
    return fam
