"""MIG advice from the prior: which profiles hold the model, and how fast
it runs on each.

Memory: a profile fits when the predicted peak times ``1 + margin`` is below
the instance's *usable* memory, which is below its nominal size: taken as
:data:`~perfseer_rt.predict.mig.USABLE_FRACTION` of the nominal GiB (an A100-40GB ``1g.5gb``
instance reports 4864 MiB = 95 % of 5 GiB; an assumption for the others,
not measured by us). The CUDA context is part of the prediction already.

Latency: a slice has ``slices x SMS_PER_SLICE`` SMs and the share of memory
bandwidth and L2 of its memory slices (nominal memory / whole-GPU memory);
the prior reruns every kernel on that reduced spec sheet.

Memory, utilization and energy per slice: ``advise(..., extra_on=...)``
adds what the caller computes for each profile (the memory of the run on
the slice, whose CUDA context is smaller with fewer SMs; SM utilization and
energy from the slice's timeline: :func:`perfseer_rt.gpu.resources.
slice_metrics`). :func:`profile_budget` turns a profile name into the budget
``fit`` and ``check`` hold a model to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.predict.mig import MIG_PROFILES, USABLE_FRACTION, find_profile, mem_fraction, usable_mib

#: SMs per compute slice: A100 14 (98 of 108 SMs in 7g, NVIDIA MIG user
#: guide); H100/H200 16 (assumption: 112 of 132 SMs in 7g).
SMS_PER_SLICE = {"a100-40gb": 14, "a100-80gb": 14, "h100-80gb": 16, "h200-141gb": 16}


def slice_spec(gpu: str, spec: GpuSpec, slices: int, memory_gb: float) -> GpuSpec:
    """The spec sheet of a slice: its SMs, and its memory share of the
    bandwidth and L2."""
    frac = mem_fraction(gpu, memory_gb)
    return spec.share(min(slices * SMS_PER_SLICE[gpu], spec.sms), frac, frac)


def profile_budget(gpu: str, spec: GpuSpec, profile: str) -> dict[str, Any]:
    """The budget of MIG ``profile`` on ``gpu`` for ``fit`` / ``check``:
    usable memory (MiB), SMs, the slice's spec sheet and its memory share.

    Raises:
        DeviceError: a GPU without MIG profiles, or a profile it does not have.
    """
    p = find_profile(gpu, profile)
    s = slice_spec(gpu, spec, p.slices, p.memory_gb)
    return {"gpu": gpu, "profile": p.name, "usable_mib": round(usable_mib(p.memory_gb), 1),
            "sms": s.sms, "spec": s, "mem_fraction": mem_fraction(gpu, p.memory_gb)}


def advise(gpu: str, spec: GpuSpec, peak_mib: float, margin: float,
           latency_on: Callable[[GpuSpec], float],
           extra_on: Callable[[GpuSpec, float, float], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Profiles of ``gpu`` (smallest first) with usable MiB, fit and latency.

    ``latency_on(spec) -> ms`` predicts the model on a slice's spec sheet;
    ``extra_on(spec, usable_mib, mem_fraction) -> dict`` (optional) adds
    per-slice metrics to each row (memory, utilization, energy: see
    :func:`perfseer_rt.gpu.resources.slice_metrics`); a row whose extra
    holds ``peak_mem_mb`` fits when that slice's own peak plus the margin is
    below the usable memory. The answer keeps the keys of
    :func:`perfseer_rt.predict.mig.suggest` (``gpu``, ``profile``,
    ``required_mb``, ``margin``) and adds ``profiles``.
    """
    need = peak_mib * (1.0 + margin)
    rows, pick = [], None
    for p in MIG_PROFILES[gpu]:
        usable = usable_mib(p.memory_gb)
        s = slice_spec(gpu, spec, p.slices, p.memory_gb)
        row: dict[str, Any] = {"profile": p.name, "usable_mib": round(usable, 1),
                               "sms": s.sms, "mem_bw_gbs": round(s.mem_bw_gbs, 1),
                               "latency_ms": round(float(latency_on(s)), 4)}
        fits = need < usable
        if extra_on is not None:
            extra = extra_on(s, usable, mem_fraction(gpu, p.memory_gb))
            row.update(extra)
            own = extra.get("peak_mem_mb", {}).get("value") if isinstance(extra.get("peak_mem_mb"), dict) else None
            if own is not None:
                fits = own * (1.0 + margin) < usable and extra["peak_mem_mb"].get("fits", True)
        row["fits"] = fits
        rows.append(row)
        if fits and pick is None:
            pick = p.name
    out = {"gpu": gpu, "profile": pick, "required_mb": round(need, 1), "margin": round(margin, 3),
           "usable_fraction": USABLE_FRACTION, "profiles": rows,
           "rule": "smallest profile whose usable memory holds the predicted peak plus margin; "
                   "latency on a slice from its share of SMs, bandwidth and L2"}
    if pick is None:
        out["reason"] = "does not fit the whole GPU"
    return out
