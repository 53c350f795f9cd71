"""Peak memory, SM utilization, energy and power of one GPU step, from the
step's kernels (:mod:`perfseer_rt.gpu.predictor`): the metric blocks next to
the step's time.

Memory: inference from :mod:`perfseer_rt.gpu.memory` (weights, the live
activation set, allocator rounding, workspace, CUDA context), training from
weights, gradients, the optimizer's state and the activations kept for
backward (every forward kernel's output).
Utilization: NVML's ``utilization.gpu`` is the share of time a kernel runs
(the GPU's busy time over the step); SM activity weights each kernel's time
by the share of SMs its grid fills. Power: idle power plus the board power
above it in proportion to SM activity, capped at the power limit (a cap
that binds slows the step in proportion). All estimates, stated as such,
until our own NVML records calibrate them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfseer_rt.gpu import memory
from perfseer_rt.gpu.spec_sheet import SpecSheet
from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.graph import PerfGraph
from perfseer_rt.graph.load import load_model

CUDA_CONTEXT_MIB = 500.0
CUBLAS_WORKSPACE_MIB = 32.0
#: Idle power as a share of board power (an assumption).
IDLE_SHARE = 0.15


def model_proto(source: Any) -> Any:
    """The ModelProto of a prediction's source (None for a PerfGraph: its
    weights are then read from the graph)."""
    return None if isinstance(source, PerfGraph) else load_model(source)[0]


@dataclass
class Resources:
    metrics: dict[str, dict[str, Any]]
    peak_mib: float
    slowdown: float = 1.0
    assumptions: list[str] = field(default_factory=list)


def sm_fill(st: Any, spec: GpuSpec) -> np.ndarray:
    """Share of SMs each kernel's grid fills (GEMM tiles of 128 x 128;
    other kernels by their elements at 2,048 threads per SM)."""
    t = st.table
    tiles = np.maximum(t["batch"], 1.0) * np.ceil(np.maximum(t["m"], 1.0) / 128) * np.ceil(
        np.maximum(t["n"], 1.0) / 128)
    elems = np.maximum(t["bytes"] / 4.0, 1.0)
    gemm = t["m"] > 0
    blocks = np.where(gemm, tiles, elems / 2048.0)
    return np.asarray(np.minimum(blocks / spec.sms, 1.0))


def estimate(graph: PerfGraph, source: Any, st: Any, spec: GpuSpec, sheet: SpecSheet, cfg: Any,
             power_limit_w: float | None) -> Resources:
    """The metric blocks of one step (module doc)."""
    prec = cfg.precision
    scale = 0.5 if prec.half else 1.0
    proto = model_proto(source)
    if cfg.mode == "train":
        weights, _ = memory.weight_bytes(proto, graph)
        params = float(graph.globals["params_total"])
        fwd = st.table.select(st.table["phase"] == "forward")
        ids = fwd["node"].astype(np.int64)
        ids = ids[ids >= 0]
        sizes = graph.node_column("out_elems")[ids] * 4.0 * scale
        mib = 2.0 ** 20
        parts = {"weights": weights / mib, "gradients": weights / mib,
                 "optimizer_state": params * cfg.optimizer.state_per_param / mib,
                 "activations": float(sizes.sum()) / mib, "activation_gradient": float(sizes.max(initial=0.0)) / mib,
                 "workspace": memory.workspace_bytes(graph, CUBLAS_WORKSPACE_MIB) / mib,
                 "cuda_context": CUDA_CONTEXT_MIB}
        parts = {k: round(v, 2) for k, v in parts.items()}
        peak = round(sum(parts.values()), 2)
    else:
        peak, parts, _ = memory.estimate(graph, proto, {"cuda_context_mib": CUDA_CONTEXT_MIB,
                                                        "cublas_workspace_mib": CUBLAS_WORKSPACE_MIB}, scale)
    busy = float(st.kernel_ms.sum())
    total = max(st.total_ms, 1e-9)
    util = min(100.0, 100.0 * busy / total)
    fill = sm_fill(st, spec)
    active = 100.0 * float((fill * st.kernel_ms).sum()) / total
    tdp = float(sheet.tdp_w)
    idle = IDLE_SHARE * tdp
    power = idle + (tdp - idle) * active / 100.0
    slowdown = 1.0
    if power_limit_w is not None:
        if not (np.isfinite(power_limit_w) and power_limit_w > idle):
            raise ValueError(f"power limit {power_limit_w} W must be above the idle power {idle:.0f} W")
        if power > power_limit_w:
            slowdown = (power - idle) / (power_limit_w - idle)
            power = float(power_limit_w)
    energy_mj = power * total * slowdown  # W x ms = mJ
    metrics = {
        "peak_mem_mb": {"value": peak, "unit": "MiB", "interval": None, "coverage": None,
                        "meaning": "estimated peak GPU memory of the process as nvidia-smi shows it",
                        "parts": parts},
        "sm_util_pct": {"value": round(util, 1), "unit": "%", "sm_active_pct": round(active, 1),
                        "meaning": "NVML utilization.gpu: share of the step in which a kernel runs; "
                                   "sm_active_pct: time-weighted share of SMs busy"},
        "energy_mj": {"value": round(energy_mj, 3), "unit": "mJ",
                      "meaning": "energy of one call/step on the GPU board (estimate)"},
        "power_w": {"value": round(power, 1), "unit": "W", "meaning": "average board power (estimate)"}}
    return Resources(metrics, peak, slowdown,
                     [f"power: idle {IDLE_SHARE:.0%} of the {tdp:g} W board power plus the rest in "
                      "proportion to SM activity (an estimate, not calibrated on measurements)"])
