"""The HELP NAS-Bench-201 latency CSV: cells and per-device latencies.

Columns ``index``, ``arch_str`` and one ``<device>_ms`` per device (the format
of ``../shared/external/help-nb201/nb201_latency.csv``; any CSV of that shape,
e.g. with other devices, works). Only the first 1,900 architectures are read:
HELP's pool (0..899) and test set (900..1899).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from training.byod.errors import ByodError

#: HELP's devices: kind, batch size, words. A device not listed here needs
#: its batch size given (``--batch DEVICE=B``): we never guess it.
DEVICES: dict[str, tuple[str, int, str]] = {
    "1080ti_1": ("gpu", 1, "NVIDIA GTX 1080 Ti, batch 1"),
    "1080ti_32": ("gpu", 32, "NVIDIA GTX 1080 Ti, batch 32"),
    "1080ti_256": ("gpu", 256, "NVIDIA GTX 1080 Ti, batch 256"),
    "2080ti_1": ("gpu", 1, "NVIDIA RTX 2080 Ti, batch 1"),
    "2080ti_32": ("gpu", 32, "NVIDIA RTX 2080 Ti, batch 32"),
    "2080ti_256": ("gpu", 256, "NVIDIA RTX 2080 Ti, batch 256"),
    "titanx_1": ("gpu", 1, "NVIDIA Titan X, batch 1"),
    "titanx_32": ("gpu", 32, "NVIDIA Titan X, batch 32"),
    "titanx_256": ("gpu", 256, "NVIDIA Titan X, batch 256"),
    "titanxp_1": ("gpu", 1, "NVIDIA Titan Xp, batch 1"),
    "titanxp_32": ("gpu", 32, "NVIDIA Titan Xp, batch 32"),
    "titanxp_256": ("gpu", 256, "NVIDIA Titan Xp, batch 256"),
    "gold_6240": ("cpu", 1, "Intel Xeon Gold 6240, batch 1"),
    "silver_4114": ("cpu", 1, "Intel Xeon Silver 4114, batch 1"),
    "silver_4210r": ("cpu", 1, "Intel Xeon Silver 4210R, batch 1"),
    "essential_ph_1": ("phone", 1, "Essential PH-1 phone, batch 1 (whole ms)"),
    "pixel3": ("phone", 1, "Google Pixel 3 phone, batch 1"),
    "samsung_a50": ("phone", 1, "Samsung Galaxy A50 phone, batch 1 (whole ms)"),
    "samsung_s7": ("phone", 1, "Samsung Galaxy S7 phone, batch 1 (whole ms)"),
}


@dataclass
class HelpData:
    """The first 1,900 architectures of a HELP-format CSV (pool + test)."""

    cells: list[str]
    latency: dict[str, np.ndarray]  # device -> ms per architecture index
    batch: dict[str, int] = field(default_factory=dict)  # device -> batch size, once known

    @property
    def devices(self) -> list[str]:
        return list(self.latency)


def load_help(path: str | Path | None, n: int = 1900) -> HelpData:
    """Read a HELP-format CSV (``index``, ``arch_str``, ``<device>_ms`` ...).

    Raises:
        ByodError: no path given, no such file, missing columns, rows out of
            order, fewer than ``n`` rows, or a latency that is not a positive number.
    """
    if path is None:
        raise ByodError("pass --csv: the HELP latency CSV (e.g. ../shared/external/help-nb201/nb201_latency.csv)")
    path = Path(path)
    if not path.is_file():
        raise ByodError(f"no HELP latency CSV at {str(path)!r}")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fields = reader.fieldnames or []
        cols = [c for c in fields if c.endswith("_ms")]
        if "arch_str" not in fields or "index" not in fields or not cols:
            raise ByodError(f"{path}: expected columns index, arch_str, <device>_ms")
        rows = [r for _, r in zip(range(n), reader)]
    if len(rows) < n:
        raise ByodError(f"{path}: {len(rows)} rows; HELP's protocol needs architectures 0..{n - 1}")
    lat: dict[str, np.ndarray] = {}
    for c in cols:
        vals = []
        for i, r in enumerate(rows):
            if int(r["index"]) != i:
                raise ByodError(f"{path}: row {i + 1} has index {r['index']}, expected {i}")
            try:
                v = float(r[c])
            except (TypeError, ValueError):
                raise ByodError(f"{path}: row {i + 1}, column {c}: {r[c]!r} is not a number") from None
            if not v > 0:
                raise ByodError(f"{path}: row {i + 1}, column {c}: latency {v} is not positive")
            vals.append(v)
        lat[c[:-3]] = np.array(vals)
    return HelpData([r["arch_str"] for r in rows], lat)


def parse_batches(items: list[str] | None) -> dict[str, int]:
    """``["dev=32", ...]`` -> ``{"dev": 32}``.

    Raises:
        ByodError: an item not of the form ``NAME=B`` with B a positive integer.
    """
    out: dict[str, int] = {}
    for item in items or []:
        name, sep, b = item.partition("=")
        if not sep or not name or not b.isdigit() or int(b) < 1:
            raise ByodError(f"--batch {item!r}: expected DEVICE=BATCH, e.g. --batch edgetpu=1")
        out[name] = int(b)
    return out


def device_batch(device: str, batches: dict[str, int] | None = None) -> int:
    """The batch size a device was measured at: ``batches`` first, then the
    HELP table.

    Raises:
        ByodError: a device of neither (we do not guess its batch size).
    """
    if batches and device in batches:
        return batches[device]
    if device in DEVICES:
        return DEVICES[device][1]
    raise ByodError(f"device {device!r}: batch size unknown; give it with --batch {device}=B "
                    f"(known devices: {', '.join(DEVICES)})")


def device_kind(device: str) -> str:
    return DEVICES.get(device, ("unknown",))[0]
