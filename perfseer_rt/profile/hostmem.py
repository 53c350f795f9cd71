"""Resident memory of this process on Linux: current RSS and the high-water mark.

The kernel keeps the peak resident set size in ``VmHWM`` of
``/proc/self/status``. Writing ``5`` to ``/proc/self/clear_refs`` resets that
peak to the current RSS, which lets one long-lived worker process measure
the peak of each model in turn. :func:`hwm_reset_works` checks that the reset
really happens here (containers may forbid the write); when it does not, the
worker falls back to one fresh process per measurement.

The peak also depends on the allocator. glibc raises its mmap threshold each
time a large mapped block is freed, after which large buffers come from the
heap, whose freed pages stay resident and fragment; the peak then carries
the history of earlier allocations. Measured here (one worker, 8 times each
between other models, then 4 fresh processes): MobileNetV2 96 px read
33.6-45.9 MiB and ResNet-18 64 px 135-154 MiB with glibc's default; with the
threshold fixed at 64 KiB (:func:`fix_mmap_threshold`) 27.2-27.8 and
114.4-114.8 MiB, the same in a reused worker and in fresh processes
(latency unchanged within noise: onnxruntime keeps its buffers in its own
arena). The CPU inference measurements fix the threshold, and
:func:`peak_method` names the method in the records.

Even so, a process that has measured other models before reads more for
small ones: memory freed at the end of session creation stays resident
there. Measured (2026-11-23, 13 dataset configurations measured first in a
reused campaign child, then each in a fresh one): GoogLeNet width 0.5 at
160 px, batch 2, 26.3 vs 16.9 MiB (resident after loading 26.3 vs 10.8);
an EfficientNet at batch 1 60.8 vs 47.1 MiB; large models within 1-4 %. A
fresh child's reading does not depend on what ran before (the same model
read the same to 0.1 MiB in repeated fresh children). ``perfseer-rt
profile`` measures every model in a fresh child, and so does the campaign:
records say ``+fresh``; a reused child's reading says ``+reused``. The training-step measurements leave glibc's
default: PyTorch allocates every CPU tensor from malloc, and mapping each
large one afresh would slow the very steps being timed.

All sizes are in KiB as the kernel reports them unless the name says MiB.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import re

_STATUS = "/proc/self/status"
#: glibc's mmap threshold while measuring, bytes: buffers of this size or more
#: are mapped on allocation and unmapped when freed.
MMAP_THRESHOLD = 64 * 1024
_M_MMAP_THRESHOLD = -3  # mallopt parameter number (malloc.h)
_fixed: list[bool] = []  # [result] once fix_mmap_threshold() has run
_CLEAR_REFS = "/proc/self/clear_refs"
_FIXED = f"vmhwm+mmap{MMAP_THRESHOLD // 1024}k"
#: The ``peak_mem_method`` of a CPU record of ``perfseer-rt profile``: the
#: threshold fixed, the model the first of a fresh measuring child.
CLI_METHOD = _FIXED + "+fresh"


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
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def fix_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD` bytes for the rest
    of this process (it stops adapting); True when glibc accepted it. Idempotent."""
    if not _fixed:
        mallopt = getattr(_libc(), "mallopt", None)
        _fixed.append(bool(mallopt and mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1))
    return bool(_fixed and _fixed[0])


def peak_method(fresh: bool | None = None) -> str:
    """How this process reads its peak: ``"vmhwm+mmap64k"`` once the mmap
    threshold is fixed (:func:`fix_mmap_threshold`), else ``"vmhwm"``; with
    ``+fresh`` when the model is the first this process measures, ``+reused``
    when others came before it (None: not known, no suffix)."""
    base = _FIXED if _fixed and _fixed[0] else "vmhwm"
    return base if fresh is None else base + ("+fresh" if fresh else "+reused")


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
