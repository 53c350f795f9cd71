"""Where GPU spec sheets live: the shipped ones and the user's.

Shipped sheets are package data, ``perfseer_rt/gpu/spec_sheets/<name>.json``
(each figure with its public source; see ``docs/gpu-spec-sheets.md``). A
user's GPU (``perfseer-rt devices add-gpu``) is a folder
``<root>/<name>/gpu-spec.json`` under the user device root
(:func:`perfseer_rt.predict.registry.user_root`), beside calibrated entries
(``<root>/<name>/manifest.json``). The root is passed in by the caller, so
this module does not import the registry (which reads these entries).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from pathlib import Path

from perfseer_rt.calibrate.store import check_name
from perfseer_rt.errors import DeviceError, PerfSeerError
from perfseer_rt.gpu.spec_sheet import SpecSheet, SpecSheetError, read_sheet
from perfseer_rt.graph.perfgraph import atomic_write_bytes

#: The file of a user GPU entry, in its folder.
SPEC_FILE = "gpu-spec.json"
#: The manifest of a calibrated (or other predictor) entry, in its folder.
MANIFEST = "manifest.json"


def sheets_dir() -> Path:
    """The folder of the shipped spec sheets."""
    return Path(str(resources.files("perfseer_rt.gpu"))) / "spec_sheets"


@lru_cache(maxsize=None)
def shipped_gpu_specs() -> dict[str, tuple[Path, SpecSheet]]:
    """Every shipped spec sheet by name (its file's stem): ``(path, sheet)``.

    Raises:
        SpecSheetError: a shipped sheet that does not validate (a packaging bug).
    """
    return {p.stem: (p, read_sheet(p)) for p in sorted(sheets_dir().glob("*.json"))}


def shipped_sheet(name: str) -> SpecSheet:
    """The shipped spec sheet ``name``.

    Raises:
        DeviceError: no such sheet (the message lists them).
    """
    found = shipped_gpu_specs()
    if name not in found:
        raise DeviceError(f"no shipped GPU spec sheet {name!r}; shipped: {', '.join(found)} "
                          "(see `perfseer-rt devices gpu-specs`)")
    return found[name][1]


def user_gpu_specs(root: Path) -> dict[str, tuple[Path, SpecSheet]]:
    """The user's GPUs under ``root`` (``registry.user_root()``) by name:
    ``(path of gpu-spec.json, sheet)``; read at each call.

    Raises:
        SpecSheetError: an entry whose file does not validate (the message
            names the file and the field; ``devices remove NAME`` deletes it).
    """
    out: dict[str, tuple[Path, SpecSheet]] = {}
    if not root.is_dir():
        return out
    for path in sorted(root.glob(f"*/{SPEC_FILE}")):
        name = path.parent.name
        if name.startswith(".") or path.parent.is_symlink():
            continue  # a write or removal in progress, or not ours
        try:
            out[name] = (path, read_sheet(path))
        except SpecSheetError as exc:
            raise SpecSheetError(exc.field, f"{exc.problem} (fix the file, or `perfseer-rt devices remove "
                                 f"{name}`)", exc.where) from None
    return out


def add_user_gpu(root: Path, name: str, sheet: SpecSheet, *, force: bool = False,
                 reserved: Iterable[str] = ()) -> Path:
    """Write ``sheet`` as the user GPU ``name``: ``root/name/gpu-spec.json``,
    atomically (the file appears whole or not at all; a folder this call made
    is removed again on failure).

    Args:
        reserved: names the user may not take (the shipped devices; the
            shipped sheets are always reserved).
        force: replace an existing user GPU of that name.

    Raises:
        PerfSeerError: a bad or reserved name, or an existing entry (a
            calibrated one is never replaced; a GPU one only with ``force``).
    """
    check_name(name)
    taken = set(reserved) | set(shipped_gpu_specs())
    if name in taken:
        raise DeviceError(f"device name {name!r} is shipped with perfseer-rt; choose another name "
                          f"(e.g. {name}-custom)")
    folder = root / name
    path = folder / SPEC_FILE
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise PerfSeerError(f"{folder} exists and is not a device folder; choose another name")
    if folder.is_dir() and not path.exists():
        raise PerfSeerError(f"{folder} is another kind of device entry (not a GPU spec); choose another "
                            "name or remove that entry first")
    if path.exists() and not force:
        raise PerfSeerError(f"user GPU {name!r} exists ({path}); pass --force to replace it")
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        atomic_write_bytes(path, sheet.to_json().encode("utf-8"))
    except BaseException:
        if made:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return path


def remove_user_gpu(root: Path, name: str) -> Path:
    """Delete the user GPU ``name`` (its folder); returns the folder.

    Raises:
        PerfSeerError: no user GPU of that name (the message lists them), or a
            folder that also holds a predictor manifest (not ours alone).
    """
    check_name(name)
    folder = root / name
    if folder.is_symlink() or not (folder / SPEC_FILE).is_file():
        names = sorted(p.parent.name for p in root.glob(f"*/{SPEC_FILE}")) if root.is_dir() else []
        raise DeviceError(f"no user GPU {name!r} (user GPUs: {', '.join(names) or 'none'}; "
                          "shipped devices cannot be removed)")
    if (folder / MANIFEST).exists():
        raise PerfSeerError(f"{folder} also holds a predictor manifest; remove it by hand if you mean to")
    trash = folder.with_name(f".{name}.removing")
    shutil.rmtree(trash, ignore_errors=True)
    folder.rename(trash)  # gone at once for readers; deleted below
    shutil.rmtree(trash, ignore_errors=True)
    return folder

