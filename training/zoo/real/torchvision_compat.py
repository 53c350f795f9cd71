"""Import timm and transformers under a CPU-only torch.

timm imports torchvision (and so does transformers when torchvision is installed)
(``torchvision.ops.misc.FrozenBatchNorm2d`` and its
transforms), and the only torchvision wheel on PyPI for torch 2.13
(``torchvision==0.28.0``) is a CUDA build: its compiled extension ``_C.so``
links ``libtorch_cuda.so`` and cannot load under the CPU torch, after which
``import torchvision`` fails with ``operator torchvision::nms does not
exist`` (its ``_meta_registrations`` registers fake kernels for ``nms`` and
``qnms`` whether or not the extension loaded).

The way around it: when, and only when, the extension cannot load, declare
the schemas of those two operators (no kernels) before torchvision is
imported. Everything timm uses from torchvision is pure Python and works;
calling ``torchvision.ops.nms`` would raise "no kernel", and no zoo model
does. Nothing is patched inside torch or torchvision.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import torch

#: The operators torchvision registers fake kernels for at import time.
_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_LIBRARY: list[torch.library.Library] = []  # kept alive: dropping it undefines the ops


def _extension_loads() -> bool:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return False
    so = next(Path(spec.origin).parent.glob("_C*.so"), None)
    if so is None:
        return False
    try:
        torch.ops.load_library(str(so))
    except (OSError, RuntimeError):
        return False
    return True


def importable_torchvision() -> None:
    """Declare torchvision's operator schemas if its extension cannot load (once)."""
    if "torchvision" not in sys.modules and not _LIBRARY and not _extension_loads():
        lib = torch.library.Library("torchvision", "DEF")
        for schema in _SCHEMAS.values():
            lib.define(schema)
        _LIBRARY.append(lib)


def import_timm():
    """``import timm`` under any torch build (see the module docstring)."""
    importable_torchvision()
    return importlib.import_module("timm")


def import_transformers():
    """``import transformers`` under any torch build (see the module docstring)."""
    importable_torchvision()
    return importlib.import_module("transformers")
