"""One call for the GPU resource metrics of a prediction: peak memory (with
parts and the three views), SM utilization, energy and power, also per MIG
slice.

The latency predictor supplies the :class:`~perfseer_rt.gpu.timeline.
KernelTimeline` of the call or step; memory comes from the graph
(:mod:`perfseer_rt.gpu.memory`), utilization and power from the timeline
(:mod:`perfseer_rt.gpu.utilization`, :mod:`perfseer_rt.gpu.power`).
When a power limit throttles the clocks, the latency factor is returned
(``throttle.latency_factor``) and utilization is computed on the
stretched timeline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import onnx

from perfseer_rt.gpu import memory, power, utilization
from perfseer_rt.gpu.precision import Precision
from perfseer_rt.gpu.spec_sheet import SpecSheet
from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.gpu.timeline import KernelTimeline
from perfseer_rt.graph.load import load_model
from perfseer_rt.graph.perfgraph import PerfGraph


def model_proto(source: Any) -> onnx.ModelProto | None:
    """The ModelProto of a prediction's source (None for a PerfGraph: its
    weights are then read from the graph)."""
    return None if isinstance(source, PerfGraph) else load_model(source)[0]


def resource_metrics(graph: PerfGraph, proto: onnx.ModelProto | None, timeline: KernelTimeline, spec: Any, *,
                     mode: str = "inference", precision: str = "fp32", optimizer: str | None = "adamw",
                     power_limit_w: float | None = None, weight_decay: bool = False,
                     capacity_mib: float | None = None, power_spec: power.PowerSpec | None = None,
                     power_coeffs: power.PowerCoeffs | None = None,
                     memory_estimate: memory.MemoryEstimate | None = None,
                     fused_attention: bool = True) -> dict[str, Any]:
    """The JSON metric blocks ``peak_mem_mb``, ``sm_util_pct``, ``energy_j``,
    ``power_w`` and ``throttle`` of one model on one GPU (or MIG slice).

    Args:
        graph, proto: the model (``proto`` None: weights from the PerfGraph).
        timeline: its kernels on ``spec`` (one call, or one training step
            with backward and optimizer kernels), from the latency predictor.
        spec: the GPU's spec sheet (``sms``, peaks, bandwidth, ``tdp_w``, ...).
        mode: ``"inference"`` or ``"train"``; ``precision`` and ``optimizer``
            as :func:`perfseer_rt.gpu.memory.predict_memory`.
        power_limit_w: a user's ``--power-limit``.
        capacity_mib: the memory available (a MIG slice): ``peak_mem_mb.fits``.
        power_spec, power_coeffs: a slice's (or a calibrated) power model.
        memory_estimate: a memory estimate already made (not recomputed).
        fused_attention: the attention pattern runs as one fused kernel
            (``--attention fused``) or materialised.

    Raises:
        PerfSeerError: bad mode, precision, optimizer, power limit, or a spec
            sheet without what the power model needs.
    """
    mem = memory_estimate or memory.predict_memory(graph, proto, spec, mode=mode, precision=precision,
                                                   optimizer=optimizer, weight_decay=weight_decay,
                                                   capacity_mib=capacity_mib,
                                                   fused_attention=fused_attention)
    pw = power.energy(timeline, power_spec or spec, precision=precision, power_limit_w=power_limit_w,
                      coeffs=power_coeffs, per="step" if mode == "train" else "call")
    busy = pw.pop("busy_ms")
    tl = timeline if not pw["throttle"]["capped"] else timeline.scaled(busy / timeline.busy_ms.clip(1e-12))
    sms = power_spec.sms if power_spec is not None else memory.gpu_facts(spec)[0]
    util = utilization.utilization(tl, sms)
    util = {"value": util["nvml"]["value"], "unit": "%",
            "meaning": "NVML utilization.gpu over the call / step (nvml); sm_active: the time-weighted "
                       "share of SMs busy (DCGM's SM activity); ESTIMATE from the kernel timeline", **util}
    return {"peak_mem_mb": mem.metric(), "sm_util_pct": util, "energy_j": pw["energy_j"],
            "power_w": pw["power_w"], "throttle": pw["throttle"],
            "assumptions": {"memory": mem.assumptions, "power": pw["assumptions"]}}


def power_model(sheet: SpecSheet, spec: GpuSpec, prec: Precision) -> power.PowerSpec:
    """The power model's view of a GPU (``spec``: the whole GPU's, from
    ``sheet``) under ``prec``: tensor-core kernels against the peak they
    run at (TF32 where fp32 runs convolutions or matmuls in TF32; the 16-bit
    tensor peak under AMP and half models)."""
    ps = power.power_spec(sheet, "fp32")
    if prec.dtype in ("fp16", "bf16"):
        tensor = spec.peak_gflops(prec.dtype)
    elif (prec.tf32_conv or prec.tf32_matmul) and spec.tf32_gflops:
        tensor = spec.peak_gflops("tf32")
    else:
        tensor = spec.fp32_gflops
    return replace(ps, fp32_tflops=spec.fp32_gflops / 1e3, tensor_tflops=tensor / 1e3,
                   mem_bw_gbs=spec.mem_bw_gbs, sms=spec.sms)


def slice_metrics(graph: PerfGraph, proto: onnx.ModelProto | None, spec: Any,
                  timeline_on: Callable[[Any], KernelTimeline], *, mode: str = "inference",
                  precision: str = "fp32", optimizer: str | None = "adamw",
                  power_limit_w: float | None = None,
                  fused_attention: bool = True) -> Callable[[Any, float, float], dict[str, Any]]:
    """The ``extra_on`` callback of :func:`perfseer_rt.gpu.mig_advice.advise`:
    for a slice (its spec sheet, usable MiB, memory share) the memory of the
    run on it (``fits`` from the allocator's simulation within the usable
    memory), SM utilization and energy from ``timeline_on(slice_spec)``,
    with the slice's share of the board's power model; ``fused_attention`` as
    :func:`resource_metrics`."""
    whole = power.power_spec(spec, precision)
    coeffs = power.default_coeffs(whole)

    def extra(slice_spec: Any, usable_mib: float, mem_fraction: float) -> dict[str, Any]:
        sms = int(getattr(slice_spec, "sms", 0))
        ps, co = power.slice_power(whole, coeffs, sms, mem_fraction)
        m = resource_metrics(graph, proto, timeline_on(slice_spec), slice_spec, mode=mode, precision=precision,
                             optimizer=optimizer, power_limit_w=power_limit_w, capacity_mib=usable_mib,
                             power_spec=ps, power_coeffs=co, fused_attention=fused_attention)
        mem = m["peak_mem_mb"]
        return {"peak_mem_mb": {"value": mem["value"], "unit": "MiB", "fits": mem["fits"],
                                "views": {k: v["value"] for k, v in mem["views"].items()}},
                "sm_util_pct": {k: m["sm_util_pct"][k]["value"] for k in ("nvml", "sm_active")},
                "energy_j": m["energy_j"]["value"], "power_w": m["power_w"]["value"],
                "throttle": m["throttle"]}
    return extra
