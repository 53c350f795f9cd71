"""Resident memory of this process on Linux: current RSS and the high-water mark.

The kernel keeps the peak resident set size in ``VmHWM`` of
``/proc/self/status``. Writing ``5`` to ``/proc/self/clear_refs`` resets that
peak to the current RSS, which lets one long-lived worker process measure
the peak of each model in turn. :func:`hwm_reset_works` checks that the reset
really happens here (containers may forbid the write); when it does not, the
worker falls back to one fresh process per measurement.

All sizes are in KiB as the kernel reports them unless the name says MiB.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import re

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


def _status_kib(key: str) -> int | None:
    try:
        with open(_STATUS) as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(rf"^{key}:\s+(\d+)\s+kB", text, re.MULTILINE)
    return int(m.group(1)) if m else None


def rss_kib() -> int | None:
    """Current resident set size, KiB (``VmRSS``); None off Linux."""
    return _status_kib("VmRSS")


def hwm_kib() -> int | None:
    """Peak resident set size since start or the last reset, KiB (``VmHWM``)."""
    return _status_kib("VmHWM")


def reset_hwm() -> bool:
    """Reset ``VmHWM`` to the current RSS; True when the write succeeded."""
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def release_free_heap() -> None:
    """Collect garbage and hand free heap pages back to the kernel (glibc).

    Without this, memory freed by the previous model stays resident in the
    allocator's free lists and the next model can reuse it without raising
    the high-water mark, which would understate its peak.
    """
    gc.collect()
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        libc = ctypes.CDLL(name)
        trim = getattr(libc, "malloc_trim", None)
        if trim is not None:
            trim(0)
    except OSError:
        pass


def hwm_reset_works() -> bool:
    """True when resetting ``VmHWM`` works in this process (tested, not assumed).

    Touches a 64 MiB buffer, frees it, resets, and checks that the peak fell
    back near the current RSS.
    """
    if hwm_kib() is None:
        return False
    buf = bytearray(64 << 20)
    for i in range(0, len(buf), 4096):  # make the pages resident
        buf[i] = 1
    del buf
    release_free_heap()
    if not reset_hwm():
        return False
    hwm, rss = hwm_kib(), rss_kib()
    return hwm is not None and rss is not None and hwm - rss < 32 << 10


def start_baseline() -> int | None:
    """Release free heap, reset the peak, and return the baseline RSS in KiB.

    Returns None when the peak cannot be reset (the caller must then measure
    in a fresh process, whose VmHWM starts at its own start-up peak).
    """
    release_free_heap()
    if not reset_hwm():
        return None
    return rss_kib()
