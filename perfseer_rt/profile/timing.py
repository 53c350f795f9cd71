"""Warm-up and timed repetition of one run, and the statistics of the samples.

Timing uses the host clock ``time.perf_counter_ns``; each sample is the wall
time of one call of ``run_once`` (which must return only when its work is
done: onnxruntime's ``run`` and ``run_with_iobinding`` synchronise the CUDA
stream before they return).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class MeasureSettings:
    """How long to warm up and how long to measure.

    The timed loop stops when both ``min_runs`` runs and ``min_time_s``
    seconds are reached, or at ``max_runs`` runs, or after ``max_time_s``
    seconds once at least ``3`` runs were timed (very slow models).

    A window whose robust CV (:func:`latency_stats`' ``latency_robust_cv``)
    is above ``max_cv`` is timed again, up to ``retries`` more windows, and
    the steadiest window is kept (:func:`stable_loop`).

    Attributes:
        min_runs: least number of timed runs (default 10).
        min_time_s: least total time of the timed window, seconds (0.5 on CPU;
            use >= 1.0 on a GPU so NVML utilization and energy have a window).
        max_runs: most timed runs (default 100000).
        max_time_s: time after which the loop stops once 3 runs exist, s.
        warmup_runs: least number of untimed runs first (default 3).
        warmup_time_s: least warm-up time, seconds (default 0.1).
        max_cv: bound on a window's robust CV (a fraction; None: no bound).
        retries: windows timed again at most while the bound is exceeded.
    """

    min_runs: int = 10
    min_time_s: float = 0.5
    max_runs: int = 100_000
    max_time_s: float = 30.0
    warmup_runs: int = 3
    warmup_time_s: float = 0.1
    max_cv: float | None = None
    retries: int = 0

    def __post_init__(self) -> None:
        if self.min_runs < 1 or self.max_runs < self.min_runs:
            raise ValueError(f"need 1 <= min_runs <= max_runs, got {self.min_runs}, "
                             f"{self.max_runs}")
        if self.min_time_s < 0 or self.max_time_s < self.min_time_s:
            raise ValueError(f"need 0 <= min_time_s <= max_time_s, got {self.min_time_s}, "
                             f"{self.max_time_s}")
        if self.warmup_runs < 0 or self.warmup_time_s < 0:
            raise ValueError("warm-up runs and time must be >= 0")
        if (self.max_cv is not None and not self.max_cv > 0) or self.retries < 0:
            raise ValueError(f"need max_cv > 0 (or None) and retries >= 0, got {self.max_cv}, {self.retries}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "MeasureSettings":
        return cls(**(d or {}))


#: ``perfseer-rt profile``'s bound on a timed window's robust CV (1.4826 MAD / median):
#: on a quiet core one onnxruntime thread repeats within 1-3 %; above 5 % other
#: load is changing the run times and the median is not the model's.
DEFAULT_MAX_CV = 0.05

#: Every measurement preset, by name: the one place where settings are defined.
#: ``cpu``/``cuda``: ``perfseer-rt profile`` (its options override them; a window
#: whose robust CV is over :data:`DEFAULT_MAX_CV` is timed again twice at most);
#: ``campaign-*``: the campaign's inference targets (``--min-time`` etc. override);
#: ``train-*``: one optimizer step in torch; ``dry-run``: a CUDA target's path on
#: the CPU; ``memory``: peak memory only (the run peak is read before the timed
#: loop, so one timed run is enough: ``training.campaign.remeasure_memory``).
PRESETS: dict[str, MeasureSettings] = {
    "cpu": MeasureSettings(max_cv=DEFAULT_MAX_CV, retries=2),
    "cuda": MeasureSettings(min_runs=10, min_time_s=1.0, max_time_s=30.0, warmup_runs=5, warmup_time_s=0.3,
                            max_cv=DEFAULT_MAX_CV, retries=2),
    "campaign-cpu": MeasureSettings(min_runs=5, min_time_s=0.4, max_time_s=10.0, warmup_runs=2),
    "campaign-cuda-inference": MeasureSettings(min_runs=10, min_time_s=1.0, max_time_s=4.0, warmup_runs=5,
                                               warmup_time_s=0.3),
    "campaign-cuda-train": MeasureSettings(min_runs=10, min_time_s=1.0, max_time_s=4.0, warmup_runs=3,
                                           warmup_time_s=0.3),
    "train-cpu": MeasureSettings(min_runs=10, min_time_s=0.5, max_time_s=30.0, warmup_runs=2, warmup_time_s=0.0),
    "train-cuda": MeasureSettings(min_runs=10, min_time_s=1.0, max_time_s=30.0, warmup_runs=3, warmup_time_s=0.3),
    "dry-run": MeasureSettings(min_runs=3, min_time_s=0.02, max_time_s=1.0, warmup_runs=1, warmup_time_s=0.0),
    "memory": MeasureSettings(min_runs=1, min_time_s=0.0, max_time_s=30.0, warmup_runs=1, warmup_time_s=0.0),
}


def warm_up(run_once: Callable[[], object], settings: MeasureSettings) -> int:
    """Run untimed until ``warmup_runs`` and ``warmup_time_s`` are both met.

    Returns the number of warm-up runs done.
    """
    runs = 0
    t0 = time.perf_counter()
    while runs < settings.warmup_runs or (time.perf_counter() - t0) < settings.warmup_time_s:
        run_once()
        runs += 1
        if runs >= settings.max_runs:
            break
    return runs


def timed_loop(run_once: Callable[[], object],
               settings: MeasureSettings) -> tuple[list[int], int]:
    """Time repeated calls of ``run_once``.

    Returns one duration per run and the wall time of the whole loop, both ns.
    """
    samples: list[int] = []
    clock = time.perf_counter_ns
    start = clock()
    min_ns = int(settings.min_time_s * 1e9)
    max_ns = int(settings.max_time_s * 1e9)
    while True:
        t0 = clock()
        run_once()
        t1 = clock()
        samples.append(t1 - t0)
        elapsed = t1 - start
        n = len(samples)
        if n >= settings.max_runs:
            break
        if n >= settings.min_runs and elapsed >= min_ns:
            break
        if elapsed >= max_ns and n >= min(3, settings.min_runs):
            break
    return samples, clock() - start


def latency_stats(samples_ns: list[int], wall_ns: int | None = None) -> dict[str, float | int]:
    """Median, mean, min, p90 (ms) and CV (std / mean) of duration samples in ns.

    ``latency_robust_cv`` is 1.4826 * MAD / median, which a few outliers (a
    preempted run on a shared machine) do not inflate.

    ``window_s`` is ``wall_ns`` in seconds when given, else the samples' sum.
    """
    if not samples_ns:
        raise ValueError("no samples")
    ms = np.asarray(samples_ns, dtype=np.float64) / 1e6
    mean = float(ms.mean())
    std = float(ms.std(ddof=1)) if ms.size > 1 else 0.0
    median = float(np.median(ms))
    mad = float(np.median(np.abs(ms - median)))
    return {
        "latency_ms": median,
        "latency_mean_ms": mean,
        "latency_min_ms": float(ms.min()),
        "latency_p90_ms": float(np.percentile(ms, 90)),
        "latency_cv": std / mean if mean > 0 else math.nan,
        "latency_robust_cv": 1.4826 * mad / median if median > 0 else math.nan,
        "runs": int(ms.size),
        "window_s": float(wall_ns / 1e9) if wall_ns is not None else float(ms.sum() / 1e3),
    }


#: The note a record gets when no window met the CV bound (formatted with the
#: steadiest window's robust CV, the bound and the number of windows, in %).
UNSTABLE_NOTE = ("latency unstable: robust CV {cv:.1f} % above the {bound:.0f} % bound in each of {n} timed "
                 "windows (other load on the machine); the median is not reliable, the fastest run "
                 "(latency_min_ms) is the least disturbed: measure again on a quieter machine")


def stable_loop(run_once: Callable[[], object], settings: MeasureSettings
                ) -> tuple[list[int], int, dict[str, Any]]:
    """:func:`timed_loop`, timed again (at most ``settings.retries`` more
    windows) while a window's robust CV is above ``settings.max_cv``; the
    window with the lowest robust CV is kept.

    Returns its samples and wall time (ns) and the record fields
    ``latency_windows`` (windows timed), ``latency_window_cvs`` (robust CV of
    each), ``latency_cv_bound`` and ``latency_stable`` (the kept window met
    the bound; None without one), plus ``notes`` (:data:`UNSTABLE_NOTE`).
    """
    windows: list[tuple[float, list[int], int]] = []
    while True:
        samples, wall_ns = timed_loop(run_once, settings)
        cv = float(latency_stats(samples)["latency_robust_cv"])
        windows.append((cv if math.isfinite(cv) else math.inf, samples, wall_ns))
        if settings.max_cv is None or cv <= settings.max_cv or len(windows) > settings.retries:
            break
    best = min(windows, key=lambda w: w[0])
    stable = None if settings.max_cv is None else bool(best[0] <= settings.max_cv)
    info: dict[str, Any] = {"latency_windows": len(windows), "latency_window_cvs": [w[0] for w in windows],
                            "latency_cv_bound": settings.max_cv, "latency_stable": stable, "notes": []}
    if stable is False and settings.max_cv is not None:
        info["notes"].append(UNSTABLE_NOTE.format(cv=100 * best[0], bound=100 * settings.max_cv, n=len(windows)))
    return best[1], best[2], info
