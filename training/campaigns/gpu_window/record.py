"""The record of one configuration, in the campaign format of the public GPU
records (:mod:`training.publicgpu.record`), measured by us.

Fields (those of a campaign record, then the extension)::

    kind           "inference" | "train"
    target         "pytorch-eager-inference" | "pytorch-eager-train"
    arch_id        first 16 hex of sha256 of {"family", "params"} (the zoo's rule)
    family, group, arch_kind, spec, config {"family", "params"}, batch
    device         our GPU key (the shipped spec sheet whose name the driver reports,
                   e.g. "h100-sxm"; a slug of the name otherwise; "cpu" in dry runs)
    status         "ok" | "oom" | "error"; error: the message (None when ok)
    metrics        latency_ms | step_ms (median), *_mean_ms, *_min_ms, *_p90_ms,
                   samples_per_s, peak_mem_mb (NVML process peak minus the CUDA context),
                   peak_mem_process_mb, torch_max_allocated_mb, torch_max_reserved_mb;
                   energy configurations also sm_util_pct, proc_sm_util_pct,
                   gpm_sm_active_pct, gpm_sm_occupancy_pct, energy_mj (per step), power_w
    quality        statistic "median", runs, warmup_runs, window_s, cv, robust_cv, timing,
                   energy_window, peak_mem_method, process_mem_before_mb (NVML, the model's
                   weights on the device, the cache emptied), cost_s (the configuration's wall time);
                   oom_masked_by (a larger batch not run after an OOM), injected (dry runs)
    input_shapes   {"input": [B, 3, H, W]} | {"input_ids": [B, seq]}
    split_arch, split_family, split_real, graph_key None, reference False,
    flops None, params (the module's parameter count), nodes None
    env            GPU name, driver, CUDA, clocks, power limit, library versions (per record)
    setup          runtime "PyTorch eager", precision, layout, mode, optimizer, step,
                   attention (timm-default | sdpa | eager | materialised), precision_flags
    measured_at    ISO time; measured_by "us"
    provenance     source, commit, code_sha256, run_id, phase, command
    gpu_state      SM / memory clock, temperature, clock-event reasons after the timed steps
    rebuild        how the module was built (the recipe the ONNX exporter repeats)
    onnx           the structure-only rebuild relative to the export cache: timm records
                   name ``torchscript/<model>@<res>.onnx`` (the public records' cache);
                   None for hf / zoo until the lead's exporter fills it
    key, record_id the configuration key and sha256(run_id, key)[:16]
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any

from training.campaigns.gpu_window.plan import Config
from training.dataset.splits import split_arch, split_family, split_real
from training.publicgpu.cache import onnx_name
from training.publicgpu.record import arch_id_of

TARGET = {"inference": "pytorch-eager-inference", "train": "pytorch-eager-train"}
STEP = {"inference": "forward under torch.inference_mode(){ac}; host waits for the output",
        "train": "zero_grad(set_to_none); forward + cross-entropy{ac}; backward; {opt}.step(); "
                 "no grad scaler"}
SOURCE = "perfseer-rt GPU window (training/campaigns/gpu_window), measured by us"
PACKAGE = Path(__file__).resolve().parent
REPO = PACKAGE.parents[2]


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def code_sha256() -> str:
    """sha256 over this package's source files (ties records to the code that made them)."""
    h = hashlib.sha256()
    for p in sorted(PACKAGE.glob("*.py")):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def commit() -> str | None:
    """The commit of the working tree: ``GPU_WINDOW_COMMIT`` (the command line
    passes it where the tree travels without ``.git``), else ``git``."""
    if os.environ.get("GPU_WINDOW_COMMIT"):
        return os.environ["GPU_WINDOW_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _version(name: str) -> str | None:
    try:
        return version(name)
    except Exception:  # not installed
        return None


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def device_key(gpu_name: str | None) -> str:
    """Our key of the GPU the driver names (the shipped spec sheet), else a slug."""
    if not gpu_name:
        return "cpu"
    # lazy: torch, NVML and the spec sheets, read only on the machine that measures
    from perfseer_rt.gpu.spec_store import shipped_gpu_specs

    for key, (_, sheet) in shipped_gpu_specs().items():
        if sheet.name == gpu_name:
            return key
    return slug(gpu_name)


def gpu_limits(index: int = 0) -> dict[str, Any]:
    """Clocks (max, application, default application, MHz), power limits (W),
    persistence mode and GPM support through NVML; {} without a driver."""
    try:
        # lazy: torch, NVML and the spec sheets, read only on the machine that measures
        import pynvml as nv

        nv.nvmlInit()
        h = nv.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # no NVIDIA driver: no GPU fields
        return {}
    calls = {
        "gpu_max_sm_clock_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
        "gpu_max_mem_clock_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM),
        "gpu_app_sm_clock_mhz": lambda: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_SM),
        "gpu_default_app_sm_clock_mhz": lambda: nv.nvmlDeviceGetDefaultApplicationsClock(h, nv.NVML_CLOCK_SM),
        "gpu_enforced_power_limit_w": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3,
        "gpu_default_power_limit_w": lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1e3,
        "gpu_persistence_mode": lambda: nv.nvmlDeviceGetPersistenceMode(h),
        "gpu_pcie_gen": lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(h),
        "gpm_supported": lambda: bool(nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice),
    }
    out: dict[str, Any] = {}
    for key, call in calls.items():
        try:
            out[key] = call()
        except Exception:  # not supported on this device
            out[key] = None
    return out


def environment(device_index: int = 0) -> dict[str, Any]:
    """The environment block (once per run): perfseer_rt's (host, CPU, GPU name,
    driver, CUDA driver version, memory, power limit, onnx/onnxruntime/numpy),
    the GPU's clocks and limits, and torch, CUDA runtime, cuDNN, timm,
    transformers and nvidia-ml-py versions."""
    # lazy: torch, NVML and the spec sheets, read only on the machine that measures
    import torch

    from perfseer_rt.profile.env import environment as base_env

    env = base_env(gpu_index=device_index)
    env.pop("timestamp_utc", None)
    env.update(gpu_limits(device_index))
    env.update(framework="PyTorch", torch_version=torch.__version__, torch_cuda_version=torch.version.cuda,
               cudnn_version=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
               timm_version=_version("timm"), transformers_version=_version("transformers"),
               nvidia_ml_py_version=_version("nvidia-ml-py"))
    return env


def record_id(run: dict[str, Any], key: str) -> str:
    return hashlib.sha256(f"{run.get('run_id')}|{key}".encode()).hexdigest()[:16]


def base_record(cfg: Config, env: dict[str, Any], device: str, run: dict[str, Any],
                build_info: dict[str, Any]) -> dict[str, Any]:
    """The fields that do not depend on the outcome."""
    a, s = cfg.arch, cfg.setting
    # lazy: torch, NVML and the spec sheets, read only on the machine that measures
    from training.campaigns.gpu_window.build import input_specs

    arch_id = arch_id_of(a.family, a.params)
    ac = f"; autocast {s.precision[4:]}" if s.precision.startswith("amp-") else ""
    step = STEP[s.mode].format(ac=ac, opt=s.optimizer or "")
    onnx = onnx_name(a.params["model"], int(a.params["res"])) if a.family == "timm" else None
    return {
        "kind": s.mode, "target": TARGET[s.mode], "arch_id": arch_id, "family": a.family,
        "group": a.group, "arch_kind": a.kind, "spec": a.spec,
        "config": {"family": a.family, "params": dict(a.params)}, "batch": s.batch,
        "device": device, "status": None, "error": None, "metrics": {}, "quality": {},
        "input_shapes": {n: list(shape) for n, shape, _, _ in input_specs(a, s.batch)},
        "split_arch": split_arch(arch_id), "split_family": split_family(arch_id, a.family),
        "split_real": split_real(arch_id, a.family, a.group),
        "graph_key": None, "reference": False, "flops": None,
        "params": build_info.get("params_count"), "nodes": None,
        "env": env,
        "setup": {"runtime": "PyTorch eager", "precision": s.precision, "layout": s.layout,
                  "mode": s.mode, "optimizer": s.optimizer, "step": step,
                  "attention": build_info.get("attention"), "energy_window": s.energy},
        "measured_at": utc_now(), "measured_by": "us",
        "provenance": {"source": SOURCE, "commit": run.get("commit"), "code_sha256": run.get("code_sha256"),
                       "run_id": run.get("run_id"), "plan": run.get("plan"), "phase": cfg.phase,
                       "command": run.get("command"), "dry_run": run.get("dry_run", False)},
        "rebuild": {k: build_info.get(k) for k in ("how", "img_size_arg", "default_res", "attention")
                    if k in build_info},
        "onnx": onnx, "key": cfg.key,
        "record_id": record_id(run, cfg.key),
    }


def finish(rec: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """Fill ``rec`` with a :meth:`Measurer.measure` result."""
    rec["status"] = result["status"]
    rec["error"] = result.get("error")
    rec["metrics"] = result.get("metrics") or {}
    rec["quality"] = result.get("quality") or {}
    rec["gpu_state"] = result.get("gpu_state")
    rec["notes"] = result.get("notes") or []
    rec["setup"]["precision_flags"] = result.get("precision_flags")
    return rec
