"""What a GPU window costs, estimated from first principles before any GPU
measurement exists (the records' ``quality.cost_s`` give the real costs after
the first window).

Per configuration: ``OVERHEAD_S`` (emptying the cache, NVML reads, writing
and syncing the record) + warm-up + timed steps, following the same stopping
rules as :class:`~training.campaigns.gpu_window.measure.Stepper` (the first
warm-up step also pays ``FIRST_STEP_S``: cuDNN / cuBLAS heuristics and lazy
kernel loading for new shapes). Per architecture: a build (``BUILD_S`` + the
initialisation of its weights on the GPU + ``ARCH_FIRST_S`` for its first
shapes) or, for a tier-1 module in a later
phase, a host-to-device copy. Per process: ``STARTUP_S`` (imports, CUDA
context, the environment block, the energy-counter probe).

The step time on an H100 SXM is ``max(t_launch, t_math) + 0.2 min(...)``:

* ``t_launch`` = operators per step (:mod:`training.campaigns.gpu_window.table`:
  eval forward, or train forward + loss + backward, plus the optimizer's
  ``foreach`` launches) x ``LAUNCH_US`` (PyTorch eager's host cost per
  operator);
* ``t_math`` = FLOPs (forward, x3 for a training step) x batch / (the
  precision's dense peak x an efficiency for the architecture's kind).

Architectures missing from the table get the median of their kind.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from typing import Any

from training.campaigns.gpu_window import table as TB
from training.campaigns.gpu_window.measure import Timing
from training.campaigns.gpu_window.plan import Config

OVERHEAD_S = 0.03
FIRST_STEP_S = 0.03
ARCH_FIRST_S = 0.2  # the first configuration of an architecture: every conv / GEMM shape is new
BUILD_S = 0.5
BUILD_S_PER_MPARAM = 0.004
RESTORE_S_PER_MPARAM = 0.0005
STARTUP_S = 25.0
LAUNCH_US = 8.0
#: H100 SXM dense peaks, TFLOP/s (perfseer_rt/gpu/spec_sheets/h100-sxm.json): IEEE fp32, TF32, fp16/bf16
PEAK_TFLOPS = {"ieee": 66.9, "tf32": 494.7, "half": 989.4}
#: fraction of the tensor-core peak eager PyTorch reaches, by kind (IEEE fp32: x2, at most 0.7)
EFFICIENCY = {"cnn": 0.35, "mobile-cnn": 0.1, "vit": 0.4, "hybrid": 0.25, "mlp-mixer": 0.45,
              "other": 0.2, "transformer": 0.4}
FOREACH_TENSORS = 110  # tensors per foreach launch (perfseer_rt.gpu.backward)
OPTIMIZER_OPS = {"sgd-momentum": 3, "adamw": 10}


def _math_rate(cfg: Config) -> float:
    """FLOP/s the configuration's math runs at."""
    p, kind = cfg.setting.precision, cfg.arch.kind
    eff = EFFICIENCY.get(kind, 0.25)
    if p.startswith("amp-"):
        return PEAK_TFLOPS["half"] * 1e12 * eff
    conv_tf32 = p != "fp32-strict" and cfg.arch.conv
    if p == "tf32" or conv_tf32:
        return PEAK_TFLOPS["tf32"] * 1e12 * eff
    return PEAK_TFLOPS["ieee"] * 1e12 * min(0.7, 2 * eff)


def step_s(cfg: Config, facts: dict[str, Any]) -> float:
    s = cfg.setting
    train = s.mode == "train"
    ops = facts["ops_train"] if train else facts["ops_fwd"]
    if train:
        launches = -(-facts["param_tensors"] // FOREACH_TENSORS)
        ops += OPTIMIZER_OPS.get(s.optimizer or "", 3) * launches + 2
    if s.precision.startswith("amp-"):
        ops = int(ops * 1.3)  # autocast's casts
    t_launch = ops * LAUNCH_US * 1e-6
    t_math = facts["flops_fwd"] * (3 if train else 1) * s.batch / _math_rate(cfg)
    return max(t_launch, t_math) + 0.2 * min(t_launch, t_math)


def config_s(cfg: Config, step: float, t: Timing) -> float:
    """The wall time of one configuration under ``t``'s stopping rules."""
    least = t.energy_warmup_s if cfg.setting.energy else t.warmup_s
    warm_n = 1
    while not ((warm_n >= t.warmup_runs and (warm_n >= t.warmup_max_runs or warm_n * step >= least))
               or warm_n * step >= t.max_time_s):
        warm_n += 1
    warm = warm_n * step + FIRST_STEP_S
    if cfg.setting.energy:
        n = max(t.min_runs, math.ceil(t.window_s / step))
    else:
        n = min(t.max_runs, max(t.min_runs, math.ceil(t.min_time_s / step)))
    n = min(n, max(3, math.ceil(t.max_time_s / step)))  # the max_time_s stop
    timed = n * step
    return OVERHEAD_S + warm + timed


def _facts_for(cfg: Config, table: dict[str, dict], by_kind: dict[str, dict]) -> dict[str, Any]:
    f = table.get(cfg.arch.spec)
    return f if f and "error" not in f else by_kind[cfg.arch.kind]


def _kind_medians(table: dict[str, dict], plan: list[Config]) -> dict[str, dict]:
    kinds: dict[str, list[dict]] = defaultdict(list)
    for c in plan:
        f = table.get(c.arch.spec)
        if f and "error" not in f:
            kinds[c.arch.kind].append(f)
    fallback = {"params": 25e6, "param_tensors": 150, "flops_fwd": 8e9, "ops_fwd": 200, "ops_train": 600}
    out: dict[str, dict] = defaultdict(lambda: fallback)
    for kind, fs in kinds.items():
        out[kind] = {k: statistics.median(f[k] for f in fs) for k in fallback}
    return out


def summarize(plan: list[Config], budget_s: float, t: Timing | None = None) -> dict[str, Any]:
    """The plan walked in order with estimated costs: what fits in ``budget_s``."""
    t = t or Timing()
    table = TB.load()
    by_kind = _kind_medians(table, plan)
    clock = STARTUP_S
    seen: set[str] = set()
    current = None
    rows = []
    for c in plan:
        f = _facts_for(c, table, by_kind)
        if c.arch.build_key != current:
            mparams = f["params"] / 1e6
            clock += (RESTORE_S_PER_MPARAM * mparams if c.arch.build_key in seen
                      else BUILD_S + BUILD_S_PER_MPARAM * mparams + ARCH_FIRST_S)
            seen.add(c.arch.build_key)
            current = c.arch.build_key
        st = step_s(c, f)
        cost = config_s(c, st, t)
        clock += cost
        rows.append((c, st, cost, clock))
    fit = [r for r in rows if r[3] <= budget_s]
    done = Counter(r[0].phase for r in fit)
    energy = sum(1 for r in fit if r[0].setting.energy)
    return {
        "budget_s": budget_s, "planned": len(plan), "planned_energy": sum(c.setting.energy for c in plan),
        "fit": len(fit), "fit_energy": energy, "fit_by_phase": dict(sorted(done.items())),
        "total_estimate_s": round(rows[-1][3], 1) if rows else 0.0,
        "median_config_s": {"time-only": round(statistics.median(
            [r[2] for r in rows if not r[0].setting.energy] or [0.0]), 3),
            "energy": round(statistics.median([r[2] for r in rows if r[0].setting.energy] or [0.0]), 3)},
        "milestones_s": {f"{n} configs": round(rows[n - 1][3], 1) for n in (250, 500, 1000, 1500, 2000)
                         if n <= len(rows)},
        "energy_milestones_s": _energy_milestones(rows),
        "archs_in_table": sum(1 for c in {r[0].arch.spec for r in rows} if c in table),
        "archs": len({r[0].arch.spec for r in rows}),
        "assumptions": {"overhead_s": OVERHEAD_S, "first_step_s": FIRST_STEP_S, "build_s": BUILD_S,
                        "startup_s": STARTUP_S, "launch_us": LAUNCH_US, "efficiency": EFFICIENCY,
                        "timing": t.to_dict()},
    }


def _energy_milestones(rows: list) -> dict[str, float]:
    out, n = {}, 0
    for c, _, _, clock in rows:
        if c.setting.energy:
            n += 1
            if n in (100, 200, 300, 400):
                out[f"{n} energy"] = round(clock, 1)
    return out


def render(s: dict[str, Any]) -> str:
    lines = [f"plan: {s['planned']} configurations ({s['planned_energy']} with the energy window), "
             f"{s['archs']} architectures ({s['archs_in_table']} counted in arch_table.json)",
             f"estimated on an H100: all of it {s['total_estimate_s']} s; within {s['budget_s']:.0f} s: "
             f"{s['fit']} configurations, {s['fit_energy']} with utilization and energy",
             f"by phase: {s['fit_by_phase']}",
             f"median configuration: {s['median_config_s']['time-only']} s time-only, "
             f"{s['median_config_s']['energy']} s with the energy window",
             f"clock at: {s['milestones_s']} {s['energy_milestones_s']}"]
    return "\n".join(lines)
