"""Energy per call / training step and average board power, from a power
model of the GPU (an ESTIMATE with stated assumptions until our own NVML
records calibrate it).

The model's form follows the component power models of the literature
(GPUWattch, ISCA 2013; AccelWattch, MICRO 2021: ``P = P_const + P_static +
P_dyn``; Guerreiro et al., HPCA 2018: the core and memory voltage/frequency
domains scale apart), reduced to what a kernel timeline tells:

    P_k = P_idle + P_sm * a_k + s^beta * P_compute * c_k + P_mem * m_k

for kernel ``k``: ``a_k`` its SM activity (:mod:`.utilization`), ``c_k``
its achieved share of the compute peak (tensor-core peak for tensor-core
kernels, else fp32), ``m_k`` its achieved share of DRAM bandwidth, ``s``
the core clock's scale (1 unless the power limit throttles it); gaps draw
``P_idle``. ``P_idle`` covers the board, fans, memory refresh and a live
CUDA context between kernels; ``P_sm`` the powered-on SMs' static and
clock-tree power; ``P_compute`` and ``P_mem`` the dynamic power of the
arithmetic pipes and of DRAM at full use.

Coefficients (:class:`PowerCoeffs`, the calibration hook: a fit on our own
NVML records replaces them per device) are fractions of the spec sheet's
TDP, ASSUMPTIONS chosen so that a dense GEMM loop draws about the TDP and a
bandwidth-bound loop clearly less, as public measurements of datacenter
GPUs show: idle 15 % of TDP on datacenter boards, 8 % on GeForce /
workstation boards; SM activity 20 %; compute 55 %; DRAM 25 %;
``beta = 2`` (dynamic power ~ f V^2 with V rising with f over the DVFS
range; an assumption between the linear and cubic laws).

Power limit: when the step's average power exceeds ``power_limit_w``, the
driver lowers the core clock. The clock scale ``s`` is the largest at which
the average power fits the limit (bisection); a kernel's busy time
stretches by ``c'_k / s + (1 - c'_k)``, ``c'_k = c_k / (c_k + m_k)`` its
compute-bound share (memory-bound time does not follow the core clock), and
the slowdown of the step is returned for the latency.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu.timeline import KernelTimeline
from perfseer_rt.gpu.utilization import sm_active_fraction

#: Lowest core clock scale the throttle search goes to.
MIN_CLOCK_SCALE = 0.3


@dataclass(frozen=True)
class PowerCoeffs:
    """The power model of one device, in watts (module doc)."""

    idle_w: float
    sm_w: float
    compute_w: float
    mem_w: float
    beta: float = 2.0
    source: str = ("ESTIMATE: fractions of the spec sheet's TDP (perfseer_rt/gpu/power.py); "
                   "not calibrated on NVML records")


@dataclass(frozen=True)
class PowerSpec:
    """What the power model reads from a spec sheet."""

    tdp_w: float
    fp32_tflops: float
    tensor_tflops: float
    mem_bw_gbs: float
    sms: int
    datacenter: bool = True
    max_power_limit_w: float | None = None


_GEFORCE = ("geforce", "rtx 30", "rtx 40", "rtx 50", "3090", "4090", "5090", "3080", "4080", "titan",
            "rtx 6000", "rtx a6000", "rtx pro", "quadro", "a6000")


def power_spec(spec: Any, precision: str = "fp32") -> PowerSpec:
    """A :class:`PowerSpec` from a spec-sheet object (the spec-sheet
    record's field names, or the prior's :class:`~perfseer_rt.gpu.specs.
    GpuSpec` with a ``tdp_w`` attribute).

    Raises:
        PerfSeerError: the spec has no TDP or no peaks.
    """
    def get(*names: str) -> float | None:
        for n in names:
            v = getattr(spec, n, None)
            if v is None and isinstance(spec, dict):
                v = spec.get(n)
            if v:
                return float(v)
        return None

    name = str(getattr(spec, "name", "") or (spec.get("name", "") if isinstance(spec, dict) else ""))
    tdp = get("tdp_w")
    if tdp is None:
        raise PerfSeerError(f"GPU {name or '?'}: the spec sheet has no tdp_w; energy and power need the "
                            "board power (add tdp_w to the spec file)")
    fp32 = get("fp32_tflops") or ((get("fp32_gflops") or 0.0) / 1e3)
    if precision in ("amp-bf16", "bf16"):
        tensor = get("bf16_tensor_fp32acc_tflops", "fp16_tensor_fp32acc_tflops", "fp16_tensor_tflops")
    elif precision in ("amp-fp16", "fp16"):
        tensor = get("fp16_tensor_fp32acc_tflops", "fp16_tensor_tflops")
    elif precision == "tf32":
        tensor = get("tf32_tensor_tflops")
    else:
        tensor = None
    if tensor is None and precision != "fp32":
        tc16 = get("tc16_gflops")
        tensor = tc16 / 1e3 if tc16 else None
    bw = get("memory_bandwidth_gbs", "mem_bw_gbs")
    sms = int(get("sms") or 0)
    if not fp32 or not bw or sms <= 0:
        raise PerfSeerError(f"GPU {name or '?'}: the spec sheet needs fp32 peak, memory bandwidth and SMs "
                            "for the power model")
    arch = str(getattr(spec, "architecture", "") or "")
    datacenter = not any(w in name.lower() for w in _GEFORCE) and arch.lower() != "geforce"
    return PowerSpec(tdp, fp32, tensor or fp32, bw, sms, datacenter, get("max_power_limit_w"))


def default_coeffs(ps: PowerSpec) -> PowerCoeffs:
    """The uncalibrated coefficients of a spec sheet (module doc)."""
    idle = 0.15 if ps.datacenter else 0.08
    return PowerCoeffs(idle_w=idle * ps.tdp_w, sm_w=0.20 * ps.tdp_w, compute_w=0.55 * ps.tdp_w,
                       mem_w=0.25 * ps.tdp_w)


def _shares(tl: KernelTimeline, ps: PowerSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per kernel: (SM activity, compute share, DRAM share), each in [0, 1]."""
    t_s = np.maximum(tl.busy_ms, 1e-12) / 1e3
    peak = np.where(tl.tensor_core, ps.tensor_tflops, ps.fp32_tflops) * 1e12
    c = np.clip(tl.flops / (t_s * peak), 0.0, 1.0)
    m = np.clip(tl.bytes / (t_s * ps.mem_bw_gbs * 1e9), 0.0, 1.0)
    a = sm_active_fraction(tl.ctas, tl.ctas_per_sm, ps.sms)
    return a, c, m


def _at_scale(tl: KernelTimeline, co: PowerCoeffs, a: np.ndarray, c: np.ndarray, m: np.ndarray,
              s: float) -> tuple[float, float, dict[str, float], np.ndarray]:
    """(energy J, wall ms, energy J by term, busy ms per kernel) at core clock scale ``s``."""
    share = np.where(c + m > 0, c / np.maximum(c + m, 1e-12), 1.0)
    busy = tl.busy_ms * (share / s + (1.0 - share))
    # achieved shares fall as a kernel stretches: same work over a longer time
    stretch = tl.busy_ms / np.maximum(busy, 1e-12)
    c_s, m_s = c * stretch, m * stretch
    t = busy / 1e3
    gaps = (tl.gap_ms.sum() + tl.tail_gap_ms) / 1e3
    parts = {"idle": co.idle_w * (float(t.sum()) + gaps),
             "sm_active": co.sm_w * float((a * t).sum()),
             # per cycle the pipes do the same work (c_s / s of the scaled peak) at f V^2 ~ s^beta
             "compute": co.compute_w * s ** (co.beta - 1.0) * float((c_s * t).sum()),
             "memory": co.mem_w * float((m_s * t).sum())}
    wall = float(busy.sum()) + (tl.gap_ms.sum() + tl.tail_gap_ms)
    return sum(parts.values()), float(wall), parts, busy


def energy(timeline: KernelTimeline, spec: Any, *, precision: str = "fp32", power_limit_w: float | None = None,
           coeffs: PowerCoeffs | None = None, per: str = "call") -> dict[str, Any]:
    """Energy and average power of one call / step (module doc).

    ``spec``: a spec-sheet object or a :class:`PowerSpec`. Returns the
    ``energy_j`` and ``power_w`` JSON blocks, ``throttle`` (clock scale,
    latency slowdown factor, whether the limit binds), ``busy_ms`` (each
    kernel's busy time at that clock, a numpy array) and ``assumptions``.

    Raises:
        PerfSeerError: a spec sheet without TDP or peaks; a power limit
            that is not positive, or below what the GPU draws idle.
    """
    ps = spec if isinstance(spec, PowerSpec) else power_spec(spec, precision)
    co = coeffs or default_coeffs(ps)
    a, c, m = _shares(timeline, ps)
    e1, wall1, parts1, busy = _at_scale(timeline, co, a, c, m, 1.0)
    s, e, wall, parts = 1.0, e1, wall1, parts1
    capped = False
    if power_limit_w is not None:
        if not power_limit_w > 0:
            raise PerfSeerError(f"--power-limit {power_limit_w}: a power limit is a positive number of watts")
        if power_limit_w <= co.idle_w:
            raise PerfSeerError(f"--power-limit {power_limit_w:g} W is at or below the GPU's estimated idle "
                                f"draw ({co.idle_w:.0f} W)")
        if wall1 > 0 and e1 / (wall1 / 1e3) > power_limit_w:
            capped = True
            lo, hi = MIN_CLOCK_SCALE, 1.0
            for _ in range(50):
                mid = 0.5 * (lo + hi)
                e_m, w_m, _, _ = _at_scale(timeline, co, a, c, m, mid)
                if e_m / (w_m / 1e3) > power_limit_w:
                    hi = mid
                else:
                    lo = mid
            s = lo
            e, wall, parts, busy = _at_scale(timeline, co, a, c, m, s)
    avg_w = e / (wall / 1e3) if wall > 0 else co.idle_w
    what = "training step" if per == "step" else "inference call"
    return {
        "energy_j": {"value": round(e, 6), "unit": "J", "value_mj": round(e * 1e3, 3),
                     "meaning": f"energy of one {what} (board power integrated over the {what}'s wall "
                                "time, kernels and host gaps), as the NVML total-energy counter would "
                                "count it; ESTIMATE from a power model of the spec sheet",
                     "parts": {k: round(v, 6) for k, v in parts.items()}},
        "power_w": {"value": round(avg_w, 2), "unit": "W",
                    "meaning": f"average board power over the {what} (NVML power.draw averaged over a "
                               "job looping it); ESTIMATE"
                               + (f", held at the {power_limit_w:g} W limit" if capped else "")},
        "throttle": {"power_limit_w": power_limit_w, "capped": capped, "clock_scale": round(s, 4),
                     "latency_factor": round(wall / wall1, 4) if wall1 > 0 else 1.0,
                     "uncapped_power_w": round(e1 / (wall1 / 1e3), 2) if wall1 > 0 else co.idle_w},
        "busy_ms": busy,
        "assumptions": [co.source, f"idle {co.idle_w:.0f} W, SM activity {co.sm_w:.0f} W, compute "
                        f"{co.compute_w:.0f} W, DRAM {co.mem_w:.0f} W at full use, dynamic core power "
                        f"~ clock^{co.beta:g}"]}


def slice_power(ps: PowerSpec, co: PowerCoeffs, sms: int, mem_fraction: float) -> tuple[PowerSpec, PowerCoeffs]:
    """A MIG slice's power spec and its share of the board's power model:
    SM, compute and idle terms scaled by its share of SMs, the DRAM term by
    its share of memory (an ASSUMPTION: NVML reports power per GPU, not per
    MIG instance; the slice is charged its share of the board)."""
    f = sms / ps.sms
    spec = replace(ps, sms=sms, fp32_tflops=ps.fp32_tflops * f, tensor_tflops=ps.tensor_tflops * f,
                   mem_bw_gbs=ps.mem_bw_gbs * mem_fraction, tdp_w=ps.tdp_w * f)
    coeffs = replace(co, idle_w=co.idle_w * f, sm_w=co.sm_w * f, compute_w=co.compute_w * f,
                     mem_w=co.mem_w * mem_fraction,
                     source=co.source + f"; a MIG slice's share of the board ({sms} of {ps.sms} SMs)")
    return spec, coeffs
