"""The measuring loop of a GPU window: the plan in order until the deadline.

For each configuration (:mod:`training.campaigns.gpu_window.plan`): skip it
when ``OUT`` already holds its record (a restarted process resumes); record
``status: "oom"`` without running it when a smaller batch of its ladder ran
out of memory (``quality.oom_masked_by``); otherwise build (or fetch) its
module and measure it (:class:`~training.campaigns.gpu_window.measure.Measurer`).
Every record goes to disk before the next configuration starts
(:class:`~training.campaigns.gpu_window.shards.ShardWriter`).

Modules: one architecture's module is on the device at a time. Tier-1 modules
move to host memory when the loop goes on to the next architecture and come
back for the later phases (a copy is much faster than a rebuild); the rest
are dropped. A host copy of the weights (``state_dict``) restores them after
every training configuration.

The deadline is checked before each configuration and before each build;
nothing new starts after it. A CUDA error that breaks the context (illegal
address, device-side assert, ...) is recorded and ends the process with
:data:`EXIT_FATAL`; ``gpu_window.sh`` then starts a fresh process, which
resumes after it.
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from tqdm import tqdm

from perfseer_rt.profile import nvml
from training.campaigns.gpu_window import build as B
from training.campaigns.gpu_window import record as R
from training.campaigns.gpu_window.measure import Measurer, Timing, collect, is_fatal, is_oom
from training.campaigns.gpu_window.plan import Config
from training.campaigns.gpu_window.shards import (
    ShardsFull,
    ShardWriter,
    append_line,
    read_records,
    write_json_atomic,
)
from training.campaigns.gpu_window.watchdog import WATCHDOG_S, Watchdog

EXIT_FATAL = 3
#: Builds of one architecture that may run out of memory before its remaining settings are
#: recorded as failed without a try (a build can take seconds; a model that does not fit never will)
BUILD_OOM_TRIES = 2
PROGRESS_S = 30.0  # a progress line this often when the bar is off (logs)
ARCHS_FILE = "archs.jsonl"
WINDOW_FILE = "window.json"


@dataclass
class RunOptions:
    out: Path
    deadline: float  #: time.time() after which nothing new starts
    device: str = "cuda"
    plan: str = "window"
    timing: Timing = field(default_factory=Timing)
    inject: dict[str, str] = field(default_factory=dict)
    limit: int | None = None  #: at most this many new configurations (tests)
    max_shard_bytes: int = 12 * 2**20
    max_shards: int = 4
    command: str = ""
    progress: bool = True
    #: a configuration still running after this many seconds is recorded as hung and the
    #: process ends with EXIT_FATAL (gpu_window.sh restarts it; the restart skips it)
    watchdog_s: float = WATCHDOG_S


class Modules:
    """The module on the device, host copies of tier-1 modules, weight snapshots."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.key: str | None = None
        self.module: torch.nn.Module | None = None
        self.info: dict[str, Any] = {}
        self.layout = "nchw"
        self.parked: dict[str, tuple[torch.nn.Module, dict[str, Any]]] = {}
        self._weights: dict[str, torch.Tensor] | None = None

    def release(self) -> None:
        """Take the current module off the device (parked on the host if tier 1)."""
        if self.module is not None and self.key is not None:
            B.set_layout(self.module, "nchw")
            if self.info.get("tier") == 1 and self.device.type == "cuda":
                self.parked[self.key] = (self.module.to("cpu"), self.info)
        self.module, self.key, self.info, self._weights = None, None, {}, None
        self.layout = "nchw"
        collect()

    def get(self, cfg: Config) -> tuple[torch.nn.Module, dict[str, Any], bool]:
        """The module of ``cfg``'s architecture on the device; True when built now."""
        key = cfg.arch.build_key
        if key == self.key and self.module is not None:
            return self.module, self.info, False
        self.release()
        if key in self.parked:
            module, info = self.parked.pop(key)
            t0 = time.perf_counter()
            self.module = module.to(self.device)
            self.info = {**info, "restore_s": time.perf_counter() - t0}
            self.key = key
            return self.module, self.info, False
        module, info = B.build_module(cfg.arch, self.device)
        self.module, self.info, self.key = module, {**info, "tier": cfg.arch.tier}, key
        return module, self.info, True

    def prepare(self, cfg: Config) -> None:
        """Layout of the weights for ``cfg``; a weight copy before its first training step."""
        assert self.module is not None
        if cfg.setting.layout != "n/a" and cfg.setting.layout != self.layout:
            B.set_layout(self.module, cfg.setting.layout)
            self.layout = cfg.setting.layout
        if cfg.setting.mode == "train" and self._weights is None:
            self._weights = {k: v.detach().to("cpu", copy=True) for k, v in self.module.state_dict().items()}

    def restore(self) -> None:
        """Put the weights (and BatchNorm statistics) back as they were before training."""
        if self.module is not None and self._weights is not None:
            self.module.load_state_dict(self._weights)


class Progress:
    """Counts of the run, written to ``window.json``."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.energy_ok = 0

    def add(self, rec: dict[str, Any]) -> None:
        key = rec["status"] + ("-masked" if rec.get("quality", {}).get("oom_masked_by") else "")
        self.counts[key] = self.counts.get(key, 0) + 1
        if rec["status"] == "ok" and rec["metrics"].get("energy_mj") is not None:
            self.energy_ok += 1


def context_mb(gpu: nvml.Device | None, device: torch.device) -> float | None:
    """NVML process memory after CUDA, cuBLAS and cuDNN are initialised, before any model."""
    # lazy: torch, loaded only when a GPU run starts
    from training.profile_train import prime_cpu, prime_cuda

    if device.type != "cuda":
        prime_cpu()  # torch's one-time CPU state (and the optimizers' lazy imports) before the first record
        return None
    prime_cuda(device.index or 0)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    if gpu is None:
        return None
    v = gpu.process_mem_mb()
    if v is not None:
        return v
    try:
        return gpu.used_mem_mb()
    except Exception:  # noqa: BLE001 - NVML without memory info: the records say None
        return None


def open_nvml(log: Callable[[str], None]) -> nvml.Device | None:
    """NVML's handle of GPU 0, or None (logged) where NVML does not open: the
    window then measures time and torch's memory without NVML's counters."""
    try:
        return nvml.Device(0)
    except Exception as exc:  # noqa: BLE001 - pynvml missing, no driver access, ...: go on without it
        log(f"NVML unavailable ({type(exc).__name__}: {exc}); measuring without its counters")
        return None


def energy_tick_ms(gpu: nvml.Device | None, device: torch.device, seconds: float = 0.3) -> float | None:
    """How often the total-energy counter changes under load (ms; median gap
    between changes over ``seconds`` of matrix products): its resolution."""
    if gpu is None or gpu.energy_mj() is None:
        return None
    a = torch.randn(4096, 4096, device=device)
    changes, last = [], gpu.energy_mj()
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        a @ a
        torch.cuda.synchronize(device)
        e = gpu.energy_mj()
        if e != last:
            changes.append(time.perf_counter())
            last = e
    gaps = sorted(b - a_ for a_, b in zip(changes, changes[1:]))
    return gaps[len(gaps) // 2] * 1e3 if gaps else None


def run(plan: list[Config], opts: RunOptions, log: Callable[[str], None] = print) -> int:
    """Measure ``plan`` into ``opts.out`` until the deadline; 0, or :data:`EXIT_FATAL`.

    torch's global settings it changes (threads, TF32 flags, cuDNN benchmark)
    are put back when it returns."""
    saved = (torch.get_num_threads(), B.saved_precision(), torch.backends.cudnn.benchmark)
    try:
        return _run(plan, opts, log)
    finally:
        torch.set_num_threads(saved[0])
        B.restore_precision(saved[1])
        torch.backends.cudnn.benchmark = saved[2]


def _run(plan: list[Config], opts: RunOptions, log: Callable[[str], None]) -> int:
    out = opts.out
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(opts.device, 0) if opts.device == "cuda" else torch.device("cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: torch sees no CUDA device")
    torch.backends.cudnn.benchmark = False  # PyTorch's default, stated
    if device.type == "cpu":
        torch.set_num_threads(1)  # dry runs: one core, beside whatever else runs
    gpu = open_nvml(log) if device.type == "cuda" else None
    done, torn = read_records(out)
    done_keys = {r.get("key") for r in done}
    oom_at: dict[str, int] = {}
    for r in done:
        if r.get("status") == "oom" and r.get("batch") is not None:
            ladder = r["key"].rsplit("|", 1)[0]
            oom_at[ladder] = min(oom_at.get(ladder, r["batch"]), r["batch"])
    env = R.environment()
    ctx_mb = context_mb(gpu, device)
    tick = energy_tick_ms(gpu, device)
    device_key = R.device_key(env.get("gpu_name"))
    run_info = {"run_id": f"{R.utc_now()}-{device_key}", "commit": R.commit(), "code_sha256": R.code_sha256(),
                "plan": opts.plan, "command": opts.command, "dry_run": opts.plan != "window"}
    doc: dict[str, Any] = {
        "started_at": R.utc_now(), "device": device_key, "env": env, "run": run_info,
        "timing": opts.timing.to_dict(), "context_mb": ctx_mb, "energy_counter_tick_ms": tick,
        "planned": len(plan), "resumed_with": len(done), "torn_lines_skipped": torn,
        "inject": opts.inject}
    earlier = _earlier_processes(out)
    _write_window(out, earlier, doc, Progress(), "running")
    log(json.dumps({"gpu_window": "start", "device": device_key, "gpu": env.get("gpu_name"),
                    "driver": env.get("gpu_driver"), "cuda": env.get("cuda_version"),
                    "torch": env.get("torch_version"), "torch_cuda": env.get("torch_cuda_version"),
                    "cudnn": env.get("cudnn_version"), "timm": env.get("timm_version"),
                    "transformers": env.get("transformers_version"), "onnx": env.get("onnx_version"),
                    "onnxruntime": env.get("onnxruntime_version"),
                    "nvidia_ml_py": env.get("nvidia_ml_py_version"), "context_mb": ctx_mb,
                    "energy_tick_ms": tick, "planned": len(plan), "already_done": len(done)}))
    measurer = Measurer(device, gpu, ctx_mb, opts.timing, opts.inject)
    modules = Modules(device)
    ctx = _Context(env, device_key, run_info, measurer, modules, _open_append(out / ARCHS_FILE))
    progress = Progress()
    state, code = "done", 0
    todo = [c for c in plan if c.key not in done_keys]
    bar = tqdm(total=len(todo), desc="gpu window", mininterval=10, disable=not opts.progress)
    writer = ShardWriter(out, opts.max_shard_bytes, opts.max_shards)
    watchdog = Watchdog(opts.watchdog_s, writer, log, EXIT_FATAL)
    new = 0
    t_start = last_line = time.time()
    try:
        for cfg in todo:
            if time.time() >= opts.deadline:
                state = "deadline"
                break
            if opts.limit is not None and new >= opts.limit:
                state = "limit"
                break
            watchdog.arm(cfg.key, functools.partial(_bare_failure, cfg, ctx, TimeoutError(
                f"no result within {opts.watchdog_s:.0f} s: the process was ended (watchdog)")))
            try:
                rec, fatal = _one(cfg, ctx, oom_at)
            except Exception as exc:  # noqa: BLE001 - unexpected (a bug, a library): a record, not a crash
                rec, fatal = _bare_failure(cfg, ctx, exc), is_fatal(exc)
            watchdog.disarm()
            writer.write(rec)
            progress.add(rec)
            new += 1
            bar.update(1)
            if fatal:
                state, code = "fatal", EXIT_FATAL
                log(f"fatal CUDA error at {cfg.key}: {str(rec['error'])[:300]}; the process ends "
                    "(gpu_window.sh restarts it)")
                break
            if new % 25 == 0:
                _write_window(out, earlier, doc, progress, "running")
            if not opts.progress and time.time() - last_line >= PROGRESS_S:
                last_line = time.time()
                log(json.dumps({"gpu_window": "progress", "at_s": round(last_line - t_start, 1),
                                "phase": cfg.phase, "new": new, **progress.counts,
                                "energy_ok": progress.energy_ok}))
    except ShardsFull as exc:
        state = "shards-full"
        log(f"stopping: {exc}")
    finally:
        watchdog.stop()
        bar.close()
        writer.close()
        os.close(ctx.archs_fd)
        if code != EXIT_FATAL:
            modules.release()
    _write_window(out, earlier, doc, progress, state)
    log(json.dumps({"gpu_window": "end", "state": state, "new_records": new, **progress.counts,
                    "energy_ok": progress.energy_ok, "left_in_plan": len(todo) - new}))
    return code


@dataclass
class _Context:
    env: dict[str, Any]
    device_key: str
    run_info: dict[str, Any]
    measurer: Measurer
    modules: Modules
    archs_fd: int
    build_failed: dict[str, str] = field(default_factory=dict)
    build_ooms: dict[str, int] = field(default_factory=dict)


def _one(cfg: Config, ctx: _Context, oom_at: dict[str, int]) -> tuple[dict[str, Any], bool]:
    """The record of one configuration, and whether the CUDA context broke."""
    ladder, batch = cfg.ladder, cfg.setting.batch
    modules = ctx.modules
    info = modules.info if cfg.arch.build_key == modules.key else {}
    rec = R.base_record(cfg, ctx.env, ctx.device_key, ctx.run_info, info)
    if ladder in oom_at and batch > oom_at[ladder]:
        return R.finish(rec, {"status": "oom", "error": f"not run: batch {oom_at[ladder]} of this setting "
                              "ran out of memory", "quality": {"oom_masked_by": oom_at[ladder], "cost_s": 0.0}}), False
    if cfg.arch.build_key in ctx.build_failed:
        msg = ctx.build_failed[cfg.arch.build_key]
        return R.finish(rec, {"status": "oom" if "OutOfMemoryError" in msg else "error",
                              "error": "build failed: " + msg, "quality": {"cost_s": 0.0}}), False
    t0 = time.perf_counter()
    try:
        module, info, built = modules.get(cfg)
        if built:
            line = {"spec": cfg.arch.spec, "family": cfg.arch.family, "params": cfg.arch.params,
                    "group": cfg.arch.group, "arch_kind": cfg.arch.kind, **info}
            append_line(ctx.archs_fd, (json.dumps(line, default=str) + "\n").encode())
        rec = R.base_record(cfg, ctx.env, ctx.device_key, ctx.run_info, info)
        modules.prepare(cfg)
    except Exception as exc:  # the architecture does not build (or move): its configurations say so
        msg = f"{type(exc).__name__}: {exc}"[:2000]
        key = cfg.arch.build_key
        if is_oom(exc):  # may pass (what the last one left): the next setting tries once more
            ctx.build_ooms[key] = ctx.build_ooms.get(key, 0) + 1
        if not is_oom(exc) or ctx.build_ooms[key] >= BUILD_OOM_TRIES:
            ctx.build_failed[key] = msg
        append_line(ctx.archs_fd, (json.dumps({"spec": cfg.arch.spec, "build_error": msg}) + "\n").encode())
        modules.release()
        fatal = is_fatal(exc) or not context_alive(modules.device)
        return R.finish(rec, {"status": "oom" if is_oom(exc) else "error", "error": "build failed: " + msg,
                              "quality": {"cost_s": time.perf_counter() - t0}}), fatal
    result = ctx.measurer.measure(cfg, module, modules.restore)
    R.finish(rec, result)
    if rec["status"] == "oom":
        oom_at[ladder] = min(oom_at.get(ladder, batch), batch)
        collect()
    fatal = bool(result.get("fatal"))
    if rec["status"] == "error" and not fatal:
        fatal = not context_alive(modules.device)  # an error no marker names may have broken it too
    return rec, fatal


def context_alive(device: torch.device) -> bool:
    """Whether a trivial kernel still runs on ``device`` (after an error: a
    broken CUDA context fails every later configuration, so the process ends
    and a fresh one resumes)."""
    if device.type != "cuda":
        return True
    try:
        torch.ones(1, device=device).add_(1).item()
        torch.cuda.synchronize(device)
    except Exception:  # noqa: BLE001 - any failure here means the context is gone
        return False
    return True


def _bare_failure(cfg: Config, ctx: _Context, exc: BaseException) -> dict[str, Any]:
    """An error record made without the architecture's details (they failed too)."""
    s = cfg.setting
    return {"kind": s.mode, "target": R.TARGET[s.mode], "family": cfg.arch.family, "group": cfg.arch.group,
            "arch_kind": cfg.arch.kind, "spec": cfg.arch.spec,
            "config": {"family": cfg.arch.family, "params": dict(cfg.arch.params)}, "batch": s.batch,
            "device": ctx.device_key, "status": "error", "error": f"{type(exc).__name__}: {exc}"[:2000],
            "metrics": {}, "quality": {"cost_s": None}, "env": ctx.env,
            "setup": {"runtime": "PyTorch eager", "precision": s.precision, "layout": s.layout,
                      "mode": s.mode, "optimizer": s.optimizer, "energy_window": s.energy},
            "measured_at": R.utc_now(), "measured_by": "us",
            "provenance": {"source": R.SOURCE, **ctx.run_info, "phase": cfg.phase}, "onnx": None,
            "key": cfg.key, "record_id": R.record_id(ctx.run_info, cfg.key)}


def _open_append(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def _earlier_processes(out: Path) -> list[dict[str, Any]]:
    """The documents of the processes that wrote to ``out`` before this one."""
    path = out / WINDOW_FILE
    if not path.is_file():
        return []
    try:
        return list(json.loads(path.read_text()).get("processes", []))
    except (json.JSONDecodeError, AttributeError):
        return []


def _write_window(out: Path, earlier: list[dict[str, Any]], doc: dict[str, Any], progress: Progress,
                  state: str) -> None:
    """``window.json``: one document per process that wrote to ``out`` (env, run, timing,
    state: running | done | deadline | limit | fatal | shards-full, counts)."""
    this = {**doc, "state": state, "updated_at": R.utc_now(), "counts": progress.counts,
            "energy_ok": progress.energy_ok}
    write_json_atomic(out / WINDOW_FILE, {"format": "perfseer-rt-gpu-window/1",
                                          "processes": [*earlier, this]})
