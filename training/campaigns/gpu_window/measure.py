"""Measure one configuration of a module already on the device.

One *step* is what a user runs once per batch:

* inference: ``model(*inputs)`` under ``torch.inference_mode()`` (and
  ``torch.autocast`` for AMP);
* train: ``opt.zero_grad(set_to_none=True)``; forward and cross-entropy loss
  (:func:`training.profile_train.default_loss`) under autocast; ``backward()``;
  ``opt.step()``. No gradient scaler (as timm's benchmark). SGD with momentum
  0.9 or AdamW (weight decay 0.05), lr 1e-4, torch's default (``foreach``)
  implementations. The weights are restored from a host copy after every
  training configuration, so every configuration starts from the same model.

Timing (:class:`Timing`): warm-up steps (>= ``warmup_runs``, until
``warmup_s``), then timed steps, each bracketed by CUDA events (the host waits
for the end event, as a loop that reads its loss or output does); on the CPU
(dry runs) ``perf_counter_ns``. A time-only configuration stops after
``max_runs`` steps or once it has ``min_runs`` steps and ``min_time_s``
seconds; an *energy* configuration runs for ``window_s`` seconds (at least
``min_runs`` steps) inside an NVML window (:class:`perfseer_rt.profile.nvml.Window`:
``utilization.gpu`` polled, per-process SM utilization, GPM SM activity and
occupancy on Hopper, the total-energy counter); every configuration stops at
``max_time_s`` once it has 3 steps. Statistic: the median of the timed steps,
with mean, min, p90, CV and robust CV (1.4826 MAD / median).

Memory: torch's ``max_memory_allocated`` / ``max_memory_reserved`` (peaks
reset before the configuration); NVML's view of the process after the timed
steps, before the cache is emptied. PyTorch's caching allocator gives no
memory back to the driver inside a configuration (only ``empty_cache()`` or an
allocation failure does), so that reading is the configuration's peak as the
driver saw it; ``peak_mem_mb`` is it minus the process's memory before any
model was built (the CUDA context and library handles).
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch

from perfseer_rt.profile import nvml
from training.campaigns.gpu_window import build as B
from training.campaigns.gpu_window.plan import Config
from training.profile_train import default_loss

LR = 1e-4
SLOW_S = 30.0  # an injected slow step (--inject SUBSTR=slow)
#: Substrings of errors after which the CUDA context is unusable (the process must restart).
FATAL_MARKERS = ("illegal memory access", "device-side assert", "unspecified launch failure",
                 "cuda error: misaligned address", "an illegal instruction", "cudaErrorLaunchFailure",
                 "CUBLAS_STATUS_EXECUTION_FAILED", "uncorrectable ECC", "GPU is lost")


@dataclass(frozen=True)
class Timing:
    """How long each configuration runs (see the module doc); seconds."""

    warmup_runs: int = 2
    warmup_max_runs: int = 5
    warmup_s: float = 0.03
    energy_warmup_s: float = 0.05
    min_runs: int = 5
    max_runs: int = 15
    min_time_s: float = 0.05
    window_s: float = 1.0
    max_time_s: float = 4.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def dry(cls) -> "Timing":
        """Short runs for the CPU dry run (it checks the mechanism, not the numbers)."""
        return cls(warmup_runs=1, warmup_max_runs=1, warmup_s=0.0, energy_warmup_s=0.0, min_runs=2,
                   max_runs=3, min_time_s=0.0, window_s=0.05, max_time_s=0.5)


class Injected(RuntimeError):
    """A failure asked for with ``--inject`` (exercises the failure paths)."""


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, (RuntimeError, MemoryError)) and ("out of memory" in text
                                                              or "can't allocate memory" in text)


def is_fatal(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(m.lower() in text for m in FATAL_MARKERS)


def make_optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=LR, momentum=0.9)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=LR, weight_decay=0.05)
    raise ValueError(f"optimizer {name!r}: choose sgd-momentum or adamw")


def _stats(ms: list[float]) -> dict[str, Any]:
    med = statistics.median(ms)
    mean = statistics.fmean(ms)
    sd = statistics.pstdev(ms) if len(ms) > 1 else 0.0
    mad = statistics.median([abs(x - med) for x in ms])
    srt = sorted(ms)
    return {"ms": med, "mean_ms": mean, "min_ms": srt[0],
            "p90_ms": srt[min(len(srt) - 1, int(0.9 * (len(srt) - 1) + 0.5))],
            "cv": sd / mean if mean > 0 else None, "robust_cv": 1.4826 * mad / med if med > 0 else None}


class Stepper:
    """Runs and times steps on one device (CUDA events, or the host clock on the CPU)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def once(self, step: Callable[[], None]) -> float:
        """One step, waited for; its time in ms."""
        if self.cuda:
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            b.synchronize()
            return float(a.elapsed_time(b))
        t0 = time.perf_counter_ns()
        step()
        return (time.perf_counter_ns() - t0) / 1e6

    def warm_up(self, step: Callable[[], None], t: Timing, energy: bool) -> int:
        t0, n = time.perf_counter(), 0
        least_s = t.energy_warmup_s if energy else t.warmup_s
        while True:
            self.once(step)
            n += 1
            el = time.perf_counter() - t0
            if n >= t.warmup_runs and (n >= t.warmup_max_runs or el >= least_s):
                return n
            if el >= t.max_time_s:
                return n

    def timed(self, step: Callable[[], None], t: Timing, energy: bool) -> tuple[list[float], float]:
        ms: list[float] = []
        t0 = time.perf_counter()
        while True:
            ms.append(self.once(step))
            el = time.perf_counter() - t0
            n = len(ms)
            if el >= t.max_time_s and n >= 3:
                break
            if energy:
                if el >= t.window_s and n >= t.min_runs:
                    break
            elif n >= t.max_runs or (n >= t.min_runs and el >= t.min_time_s):
                break
        return ms, time.perf_counter() - t0


def gpu_state(gpu: nvml.Device | None) -> dict[str, Any] | None:
    """SM / memory clocks (MHz), temperature (C) and clock-event reasons now."""
    if gpu is None:
        return None
    nv, h = gpu.nv, gpu.handle
    out: dict[str, Any] = {}
    reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    calls: dict[str, Callable[[], Any]] = {
        "sm_clock_mhz": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
        "mem_clock_mhz": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
        "temp_c": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
        "clocks_event_reasons": lambda: reasons(h) if reasons else None,
    }
    for key, call in calls.items():
        try:
            out[key] = int(call())
        except Exception:  # not supported here: left out
            out[key] = None
    return out


class Measurer:
    """Measures configurations of one module at a time (see the module doc).

    Args:
        device: where the module lives.
        gpu: NVML device (None on the CPU).
        context_mb: NVML process memory before any model was built, MiB.
        timing: run lengths.
        inject: ``{config key substring: "oom" | "error" | "fatal" | "slow"}``:
            failures raised inside the steps of a matching configuration (dry
            runs: they exercise the failure paths), or one step that sleeps.
    """

    def __init__(self, device: torch.device, gpu: nvml.Device | None, context_mb: float | None,
                 timing: Timing, inject: dict[str, str] | None = None) -> None:
        self.device = device
        self.gpu = gpu
        self.context_mb = context_mb
        self.timing = timing
        self.inject = inject or {}
        self.stepper = Stepper(device)

    def _proc_mem_mb(self) -> tuple[float | None, str | None]:
        if self.gpu is None:
            return None, None
        v = self.gpu.process_mem_mb()
        if v is not None:
            return v, "nvml_process"
        try:
            return self.gpu.used_mem_mb(), "nvml_device_used"
        except Exception:  # noqa: BLE001 - an NVML error must not cost the configuration its timing
            return None, None

    def _injected(self, cfg: Config) -> Callable[[], None] | None:
        for sub, kind in self.inject.items():
            if sub in cfg.key:
                return _Failure(kind, self.device)
        return None

    def measure(self, cfg: Config, module: torch.nn.Module, snapshot: Callable[[], None]) -> dict[str, Any]:
        """Measure ``cfg`` on ``module``; returns the result fields of its record
        (``status``, ``error``, ``metrics``, ``quality``, ``gpu_state``, ``notes``,
        ``precision_flags``; ``fatal`` for a failure that broke the CUDA context).

        ``snapshot()`` restores the module's weights (called after a training
        configuration, also a failed one).
        """
        s, dev, t = cfg.setting, self.device, self.timing
        B.set_precision(s.precision)
        flags = B.precision_flags()
        cuda = dev.type == "cuda"
        if cuda:
            torch.cuda.synchronize(dev)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        before_mb, _ = self._proc_mem_mb()
        inputs: Any = None
        opt: Any = None
        window: nvml.Window | None = None
        fail = self._injected(cfg)
        t0 = time.perf_counter()
        try:
            inputs = B.make_inputs(cfg.arch, s.batch, s.layout, dev)
            ac = B.autocast(s.precision, dev)
            if s.mode == "inference":
                module.eval()

                def step() -> None:
                    if fail is not None:
                        fail()
                    with torch.inference_mode(), ac:
                        module(*inputs)
            else:
                module.train()
                opt = make_optimizer(s.optimizer or "", module.parameters())

                def step() -> None:
                    if fail is not None:
                        fail()
                    opt.zero_grad(set_to_none=True)
                    with ac:
                        loss = default_loss(module(*inputs))
                    loss.backward()
                    opt.step()
            warmups = self.stepper.warm_up(step, t, s.energy)
            counters: dict[str, Any] = {}
            notes: list[str] = []
            if s.energy and self.gpu is not None:
                try:
                    window = nvml.Window(self.gpu)
                    window.begin()
                except Exception as exc:  # noqa: BLE001 - measure the time without the counters
                    notes.append(f"NVML window did not start: {type(exc).__name__}: {exc}"[:300])
                    if window is not None:
                        window.close()
                    window = None
            ms, window_s = self.stepper.timed(step, t, s.energy)
            if window is not None:
                try:
                    counters = window.end(len(ms))
                except Exception as exc:  # noqa: BLE001 - the timing stands without the counters
                    notes.append(f"NVML window failed: {type(exc).__name__}: {exc}"[:300])
                    window.close()
                notes.extend(window.notes)
                window = None
            elif s.energy and self.gpu is None:
                notes.append("no NVML on this device: no utilization or energy")
            state = gpu_state(self.gpu)
            proc_mb, method = self._proc_mem_mb()
            st = _stats(ms)
            time_key = "latency" if s.mode == "inference" else "step"
            metrics: dict[str, Any] = {f"{time_key}_{k}": v for k, v in st.items()}
            metrics[f"{time_key}_ms"] = st["ms"]
            del metrics[f"{time_key}_cv"], metrics[f"{time_key}_robust_cv"]
            metrics["samples_per_s"] = s.batch * 1e3 / st["ms"] if st["ms"] > 0 else None
            if cuda:
                metrics["torch_max_allocated_mb"] = torch.cuda.max_memory_allocated(dev) / 2**20
                metrics["torch_max_reserved_mb"] = torch.cuda.max_memory_reserved(dev) / 2**20
            metrics["peak_mem_process_mb"] = proc_mb
            metrics["peak_mem_mb"] = (proc_mb - self.context_mb if proc_mb is not None
                                      and self.context_mb is not None else None)
            metrics.update({k: v for k, v in counters.items()})
            quality = {"statistic": "median", "runs": len(ms), "warmup_runs": warmups,
                       "window_s": window_s, "cv": st["cv"], "robust_cv": st["robust_cv"],
                       "timing": "cuda_events" if cuda else "perf_counter",
                       "energy_window": s.energy, "peak_mem_method": method,
                       "process_mem_before_mb": before_mb,
                       "cost_s": time.perf_counter() - t0, "injected": fail is not None}
            return {"status": "ok", "error": None, "metrics": metrics, "quality": quality,
                    "gpu_state": state, "notes": notes, "precision_flags": flags}
        except Exception as exc:  # every failure is a record: oom, fatal, error
            if window is not None:
                window.close()
            status = "oom" if is_oom(exc) else "error"
            return {"status": status, "error": f"{type(exc).__name__}: {exc}"[:2000],
                    "metrics": {}, "quality": {"cost_s": time.perf_counter() - t0,
                                               "injected": fail is not None},
                    "fatal": is_fatal(exc), "gpu_state": None, "notes": [],
                    "precision_flags": flags}
        finally:
            inputs = opt = None  # noqa: F841 - drop references before emptying the cache
            self._clean_up(module, train=s.mode == "train", snapshot=snapshot)

    def _clean_up(self, module: torch.nn.Module, *, train: bool, snapshot: Callable[[], None]) -> None:
        """Drop gradients, restore trained weights, free what a failure left
        (the traceback's frames held activations: gc), empty the cache. A broken
        CUDA context raises here: ignored, the runner ends the process."""
        try:
            module.zero_grad(set_to_none=True)
            if train:
                snapshot()
            gc.collect(0)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
                torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - the context is gone; the record says why
            pass


class _Failure:
    """An injected failure, raised from inside a step (``--inject``): ``oom`` (after a
    real allocation), ``error``, ``fatal`` (a message of a broken CUDA context), or
    ``slow`` (the first step sleeps :data:`SLOW_S`, nothing fails)."""

    def __init__(self, kind: str, device: torch.device) -> None:
        self.kind = kind
        self.device = device
        self.slept = False

    def __call__(self) -> None:
        if self.kind == "slow":
            if not self.slept:
                self.slept = True
                time.sleep(SLOW_S)
            return
        if self.kind == "oom":
            torch.empty(1 << 16, device=self.device)
            raise torch.OutOfMemoryError("out of memory (injected by --inject)")
        if self.kind == "fatal":
            raise Injected("CUDA error: an illegal memory access was encountered (injected by --inject)")
        raise Injected("injected failure (--inject)")


def collect() -> None:
    """Free what the last architecture left (between architectures: gc is slow)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
