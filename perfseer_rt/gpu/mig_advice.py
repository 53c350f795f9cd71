"""MIG advice from the prior: which profiles hold the model, and how fast
it runs on each.

Memory: a profile fits when the predicted peak times ``1 + margin`` is below
the instance's *usable* memory, which is below its nominal size: taken as
:data:`USABLE_FRACTION` of the nominal GiB (an A100-40GB ``1g.5gb``
instance reports 4864 MiB = 95 % of 5 GiB; an assumption for the others,
not measured by us). The CUDA context is part of the prediction already.

Latency: a slice has ``slices x SMS_PER_SLICE`` SMs and the share of memory
bandwidth and L2 of its memory slices (nominal memory / whole-GPU memory);
the prior reruns every kernel on that reduced spec sheet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.predict.mig import MIG_PROFILES

USABLE_FRACTION = 0.95
#: SMs per compute slice: A100 14 (98 of 108 SMs in 7g, NVIDIA MIG user
#: guide); H100/H200 16 (assumption: 112 of 132 SMs in 7g).
SMS_PER_SLICE = {"a100-40gb": 14, "a100-80gb": 14, "h100-80gb": 16, "h200-141gb": 16}


def slice_spec(gpu: str, spec: GpuSpec, slices: int, memory_gb: float) -> GpuSpec:
    whole = MIG_PROFILES[gpu][-1].memory_gb
    frac = memory_gb / whole
    return spec.share(min(slices * SMS_PER_SLICE[gpu], spec.sms), frac, frac)


def advise(gpu: str, spec: GpuSpec, peak_mib: float, margin: float,
           metrics_on: Callable[[GpuSpec], dict[str, Any]]) -> dict[str, Any]:
    """Profiles of ``gpu`` (smallest first) with usable MiB, fit and the
    model's metrics on each slice.

    ``metrics_on(spec) -> {"latency_ms": ..., ...}`` predicts the model on a
    slice's spec sheet.
    The answer keeps the keys of :func:`perfseer_rt.predict.mig.suggest`
    (``gpu``, ``profile``, ``required_mb``, ``margin``) and adds ``profiles``.
    """
    need = peak_mib * (1.0 + margin)
    rows, pick = [], None
    for p in MIG_PROFILES[gpu]:
        usable = p.memory_gb * 1024.0 * USABLE_FRACTION
        s = slice_spec(gpu, spec, p.slices, p.memory_gb)
        fits = need < usable
        rows.append({"profile": p.name, "usable_mib": round(usable, 1), "fits": fits,
                     "sms": s.sms, "mem_bw_gbs": round(s.mem_bw_gbs, 1), **metrics_on(s)})
        if fits and pick is None:
            pick = p.name
    out = {"gpu": gpu, "profile": pick, "required_mb": round(need, 1), "margin": round(margin, 3),
           "usable_fraction": USABLE_FRACTION, "profiles": rows,
           "rule": "smallest profile whose usable memory holds the predicted peak plus margin; "
                   "a slice's metrics from its share of SMs, bandwidth and L2"}
    if pick is None:
        out["reason"] = "does not fit the whole GPU"
    return out
