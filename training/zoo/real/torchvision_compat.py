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
does. Nothing is patched inside torch or torchvision, except by
:func:`export_kernels` (for exporting detection models): it adds CPU kernels
for ``nms`` and ``roi_align`` and replaces torchvision's ``_has_ops`` check.
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
#: Operators detection models call, declared for exporting them (see export_kernels).
_EXPORT_SCHEMAS = {
    "roi_align": "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                 "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor",
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


def _nms(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy non-maximum suppression (torchvision's semantics), in plain torch."""
    x1, y1, x2, y2 = dets.unbind(1)
    area = (x2 - x1) * (y2 - y1)
    dropped = torch.zeros(len(dets), dtype=torch.bool)
    keep = []
    for i in scores.argsort(descending=True).tolist():
        if dropped[i]:
            continue
        keep.append(i)
        w = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
        h = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
        inter = w * h
        dropped |= inter / (area[i] + area - inter) > iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


def _roi_align_shape(x: torch.Tensor, rois: torch.Tensor, spatial_scale: float, pooled_height: int,
                     pooled_width: int, sampling_ratio: int, aligned: bool) -> torch.Tensor:
    """RoIAlign's output shape (zeros): for tracing an export only."""
    return x.new_zeros((rois.shape[0], x.shape[1], pooled_height, pooled_width))


def export_kernels() -> None:
    """Let torch trace torchvision's detection models for ONNX export when
    its compiled extension cannot load: CPU kernels for ``nms`` (exact) and
    ``roi_align`` (**zeros** of the right shape: the exporter records the op,
    which onnxruntime then runs with its own kernel; never run these models
    in torch), and torchvision told that its ops are there. Call before
    importing torchvision; for export scripts only, never for measuring."""
    importable_torchvision()
    if not _LIBRARY:
        return  # the extension loaded: its kernels are used
    lib = _LIBRARY[0]
    if getattr(lib, "_perfseer_export", False):
        return  # done once
    for schema in _EXPORT_SCHEMAS.values():
        lib.define(schema)
    lib.impl("nms", _nms, "CPU")
    lib.impl("roi_align", _roi_align_shape, "CPU")
    lib._perfseer_export = True  # type: ignore[attr-defined]
    extension = importlib.import_module("torchvision.extension")
    original = extension._has_ops  # type: ignore[attr-defined]
    for name, module in list(sys.modules.items()):  # modules that imported it by name too
        if name.startswith("torchvision") and getattr(module, "_has_ops", None) is original:
            module._has_ops = _has_ops  # type: ignore[attr-defined]


def _has_ops() -> bool:
    """torchvision's check that its ops are registered (they are, by export_kernels)."""
    return True
