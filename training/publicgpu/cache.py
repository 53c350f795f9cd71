"""The export cache's layout: ``CACHE/<exporter>/<model>@<img_size>.onnx``.

The cache is never committed (the lead's copy: ``/work/cache/public-gpu``).
An export writes into a temporary folder beside its file (prefix
:data:`TMP_PREFIX`) and renames a ``.part`` file into place, so a killed export
leaves no file under the final name; :func:`clean` removes its leftovers.
"""

from __future__ import annotations

import shutil
from pathlib import Path

EXPORTERS = ("torchscript", "dynamo")
#: Prefix of the temporary folders an export writes beside its file.
TMP_PREFIX = "psrt-export-"


def onnx_name(model: str, img_size: int, exporter: str = "torchscript") -> str:
    """The rebuild's path relative to the cache."""
    return f"{exporter}/{model}@{img_size}.onnx"


def onnx_file(cache: Path, model: str, img_size: int) -> Path | None:
    """The rebuild of ``(model, img_size)`` in ``cache``: the TorchScript export,
    else the dynamo one (a fallback), else None."""
    for exporter in EXPORTERS:
        path = cache / onnx_name(model, img_size, exporter)
        if path.exists():
            return path
    return None


def clean(cache: Path) -> None:
    """Remove what killed exports left behind (temporary folders, ``.part`` files)."""
    for sub in EXPORTERS:
        folder = cache / sub
        if folder.is_dir():
            for p in folder.glob(f"{TMP_PREFIX}*"):
                shutil.rmtree(p, ignore_errors=True)
            for p in folder.glob("*.part"):
                p.unlink(missing_ok=True)
