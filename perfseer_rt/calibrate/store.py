"""Where calibrated device entries live.

User entries are folders ``<root>/<device>/`` holding ``manifest.json`` and
the base predictor's ONNX files, like a shipped device. The root is
``$PERFSEER_RT_HOME/devices`` when that variable is set, else
``$XDG_DATA_HOME/perfseer-rt/devices`` (``~/.local/share/perfseer-rt/devices``).
The root is :func:`perfseer_rt.predict.registry.user_root`; the registry lists them beside the
shipped ones.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from perfseer_rt.errors import PerfSeerError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def check_name(name: str) -> None:
    if not NAME.match(name or ""):
        raise PerfSeerError(f"device name {name!r}: use letters, digits, '.', '_' or '-' "
                            "(at most 64, starting with a letter or digit)")


def write_entry(folder: Path, manifest: dict[str, Any], model_files: dict[str, Path], overwrite: bool = False) -> Path:
    """Write ``manifest.json`` and copies of ``model_files`` (name -> source)
    into ``folder`` atomically: everything goes to a temporary folder beside it,
    renamed into place at the end; nothing is left behind on failure.

    Raises:
        PerfSeerError: ``folder`` exists and ``overwrite`` is False.
    """
    folder = Path(folder)
    if folder.exists() and not overwrite:
        raise PerfSeerError(f"{folder} exists; pass --force to replace it")
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        for name, src in model_files.items():
            shutil.copyfile(src, tmp / name)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        if folder.exists():
            old = folder.with_name(f".{folder.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            folder.rename(old)
            tmp.rename(folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder
