"""SM utilization of a call or training step, from its kernel timeline.

Two figures, as the tools that report them define them:

* ``nvml`` (``nvidia-smi``'s ``utilization.gpu``, NVML
  ``nvmlDeviceGetUtilizationRates``): the percent of time, over the
  driver's sample period (1/6 s to 1 s), during which one or more kernels
  was executing. A job that loops the step shows the step's busy share:
  ``sum(busy) / (sum(busy) + sum(gaps))``, gaps being the host-side idle
  time between kernels and between steps.
* ``sm_active`` (DCGM ``DCGM_FI_PROF_SM_ACTIVE``; Nsight's "SM active"):
  the fraction of time at least one warp is resident on an SM, averaged over
  all SMs. A kernel of ``C`` CTAs with ``k`` CTAs resident per SM on ``S``
  SMs runs in ``ceil(C / (k S))`` waves; the full waves keep every SM busy,
  the last one ``min(1, r / S)`` of them (``r`` CTAs left, one per SM
  first), each wave taking the same time (an ASSUMPTION of equal CTA
  durations). A kernel with fewer CTAs than SMs leaves the rest idle for its
  whole length: small batches and tiny kernels show a busy GPU by NVML and
  a mostly idle one by SM activity.

Both are percentages of the wall time of the step as :class:`KernelTimeline`
gives it (kernels plus every gap).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu.timeline import KernelTimeline

NVML_MEANING = ("NVML utilization.gpu (what nvidia-smi shows as GPU-Util) for a job looping this "
                "step: percent of time at least one kernel runs; host-side gaps between kernels and "
                "steps count as idle")
SM_ACTIVE_MEANING = ("DCGM SM_ACTIVE-like SM activity: percent of time an SM has at least one warp "
                     "resident, averaged over all SMs (waves of CTAs; a partly filled last wave and "
                     "kernels with fewer CTAs than SMs leave SMs idle); host gaps count as idle")


def sm_active_fraction(ctas: np.ndarray, ctas_per_sm: np.ndarray, sms: int) -> np.ndarray:
    """Per kernel: the time-averaged fraction of SMs with a CTA resident
    (module doc); 1 where the grid is unknown (0)."""
    if sms <= 0:
        raise PerfSeerError(f"sms={sms}: a GPU has at least one SM")
    c = np.asarray(ctas, np.float64)
    per_wave = np.maximum(np.asarray(ctas_per_sm, np.float64), 1.0) * sms
    waves = np.ceil(np.maximum(c, 1.0) / per_wave)
    full = np.floor(c / per_wave)
    rest = c - full * per_wave
    tail = np.where(rest > 0, np.minimum(1.0, rest / sms), 0.0)
    frac = (full + tail) / waves
    return np.where(c <= 0, 1.0, np.clip(frac, 0.0, 1.0))


def utilization(timeline: KernelTimeline, sms: int) -> dict[str, Any]:
    """The ``sm_util_pct`` JSON block of ``timeline`` on a GPU (or a MIG
    slice) of ``sms`` SMs: ``nvml`` and ``sm_active``, each with value,
    unit and meaning, plus the step's busy and idle milliseconds."""
    total = timeline.total_ms
    busy = timeline.busy_total_ms
    frac = sm_active_fraction(timeline.ctas, timeline.ctas_per_sm, sms)
    if total <= 0:
        nvml = active = 0.0
    else:
        nvml = 100.0 * busy / total
        active = 100.0 * float((timeline.busy_ms * frac).sum()) / total
    return {"nvml": {"value": round(nvml, 2), "unit": "%", "meaning": NVML_MEANING},
            "sm_active": {"value": round(active, 2), "unit": "%", "meaning": SM_ACTIVE_MEANING},
            "busy_ms": round(busy, 4), "idle_ms": round(total - busy, 4), "sms": int(sms),
            "kernels": len(timeline)}
