"""Measure one training step (forward, loss, backward, optimizer update) of a torch module.

The training-side twin of :mod:`perfseer_rt.profile` (DESIGN.md section 3,
"training (torch)" column). One step is::

    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(module(*inputs))
    loss.backward()
    optimizer.step()

CPU: host clock (``time.perf_counter_ns``) per step after warm-up, repeated
until a minimum count and window; peak resident memory (``VmHWM``, reset via
``/proc/self/clear_refs``) over the RSS before the model was built, MiB.

CUDA: per-step time from CUDA events around the step (the host waits for the
end event each step, as a training loop that reads its loss does); peak
device memory of the process from NVML, sampled on a background thread, over
its value before the model was built (the CUDA context and the cuDNN/cuBLAS
handles, created once per process by :func:`prime_cuda`, are in that
baseline); ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``;
NVML utilization, per-process SM utilization, GPM SM activity and the
energy counter over the timed steps (>= 1 s), energy per step in mJ.

An out-of-memory step is recorded as status ``"oom"`` (then the cache is
emptied); other failures as ``"error"``; never as 0.

:class:`TrainWorker` runs the measurements in a child process
(``python -m training.profile_train``), one model after another, so a crash
costs one record and NVML's per-process memory is that of the measurement.
"""

from __future__ import annotations

import gc
import importlib
import os
import time
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from perfseer_rt.profile import hostmem, nvml
from perfseer_rt.profile.env import environment
from perfseer_rt.profile.record import classify_failure
from perfseer_rt.profile.timing import PRESETS, MeasureSettings, latency_stats, timed_loop, warm_up
from perfseer_rt.profile.worker import ChildDied, JsonChild, serve

TRAIN_FIELDS = (
    "status", "error",
    "step_ms", "step_mean_ms", "step_min_ms", "step_p90_ms", "step_cv", "step_robust_cv",
    "step_wall_ms", "runs", "window_s", "warmup_runs", "build_ms", "timing",
    "peak_mem_mb", "peak_mem_process_mb", "peak_mem_method",
    "torch_max_allocated_mb", "torch_max_reserved_mb",
    "sm_util_pct", "proc_sm_util_pct", "gpm_sm_active_pct", "gpm_sm_occupancy_pct",
    "energy_mj", "power_w",
    "device", "optimizer", "lr", "loss", "threads", "batch", "input_shapes", "input_dtypes",
    "params_count", "torch_settings", "env", "notes",
)

CPU_SETTINGS, CUDA_SETTINGS = PRESETS["train-cpu"], PRESETS["train-cuda"]

Inputs = Sequence[torch.Tensor]
Builder = Callable[[], tuple[torch.nn.Module, Inputs]]


def new_train_record(**fields: Any) -> dict[str, Any]:
    """A record with every field of :data:`TRAIN_FIELDS`, unset ones None."""
    unknown = set(fields) - set(TRAIN_FIELDS)
    if unknown:
        raise KeyError(f"unknown training record fields {sorted(unknown)}")
    rec: dict[str, Any] = dict.fromkeys(TRAIN_FIELDS)
    rec["notes"] = []
    rec.update(fields)
    return rec


def default_loss(output: Any) -> torch.Tensor:
    """Cross-entropy of the (first) output's last dim against fixed pseudo-labels.

    Works for classifier logits ``[B, C]`` and language-model logits
    ``[B, T, V]``; labels are ``arange % C`` (deterministic, no extra
    randomness); a rank-1 or integer output falls back to ``mean()``.
    """
    if isinstance(output, (tuple, list)):
        output = output[0]
    if isinstance(output, dict):
        output = next(iter(output.values()))
    if output.dim() < 2 or not output.is_floating_point():
        return output.float().mean()
    logits = output.reshape(-1, output.shape[-1])
    labels = torch.arange(logits.shape[0], device=logits.device) % logits.shape[1]
    return F.cross_entropy(logits.float(), labels)


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    """``"sgd"`` (momentum 0.9) or ``"adam"``."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise ValueError(f"optimizer {name!r}: choose sgd or adam")


def torch_env() -> dict[str, Any]:
    """torch, CUDA-runtime and cuDNN versions for the env block."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"torch_version": torch.__version__, "torch_cuda_version": torch.version.cuda,
            "cudnn_version": cudnn}


def _torch_settings() -> dict[str, Any]:
    return {"tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "tf32_cudnn": torch.backends.cudnn.allow_tf32,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "dtype": "float32"}


_primed: set[Any] = set()


def _prime_net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4))


def prime_cpu() -> None:
    """Run one small training step on the CPU once per process.

    torch's one-time CPU state (thread pool, oneDNN primitives, autograd
    engine) then sits in every later measurement's memory baseline, so the
    first model measured in a worker is not charged for it.
    """
    if "cpu" in _primed:
        return
    net = _prime_net()
    opt = torch.optim.Adam(net.parameters())
    default_loss(net(torch.randn(2, 3, 8, 8))).backward()
    opt.step()
    del net, opt
    gc.collect()
    _primed.add("cpu")


def prime_cuda(device_id: int = 0) -> None:
    """Create the CUDA context and the cuBLAS/cuDNN handles once per process.

    A small conv + linear forward/backward, so that these one-time costs sit
    in every later measurement's memory baseline.
    """
    if device_id in _primed:
        return
    dev = torch.device("cuda", device_id)
    torch.cuda.set_device(dev)
    net = _prime_net().to(dev)
    opt = torch.optim.Adam(net.parameters())
    default_loss(net(torch.randn(2, 3, 8, 8, device=dev))).backward()
    opt.step()
    torch.cuda.synchronize(dev)
    del net, opt
    gc.collect()
    torch.cuda.empty_cache()
    _primed.add(device_id)


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, getattr(torch.cuda, "OutOfMemoryError", ())):
        return True
    return isinstance(exc, (RuntimeError, MemoryError)) and classify_failure(str(exc)) == "oom"


def measure_train_step(build: Builder, *, device: str = "cpu", optimizer: str = "sgd",
                       lr: float = 1e-3, loss_fn: Callable[[Any], torch.Tensor] | None = None,
                       settings: MeasureSettings | None = None, threads: int | None = None,
                       batch: int | None = None, device_id: int = 0) -> dict[str, Any]:
    """Measure one optimizer step of the module that ``build()`` returns.

    Args:
        build: ``() -> (module, inputs)``, called after the memory baseline
            is taken so that weights, gradients and optimizer state count.
        device: ``"cpu"`` or ``"cuda"``.
        optimizer: ``"sgd"`` (momentum 0.9) or ``"adam"``; ``lr`` its rate.
        loss_fn: output -> scalar loss (default :func:`default_loss`).
        settings: warm-up and window (defaults: CPU_SETTINGS / CUDA_SETTINGS).
        threads: torch intra-op threads on the CPU (None: torch's default).
        batch: recorded as given.

    Returns:
        A record with the fields of :data:`TRAIN_FIELDS` (no ``env``; see
        :func:`finish_train_record`).
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r}: choose cpu or cuda")
    if device == "cuda":
        return _measure_cuda(build, optimizer=optimizer, lr=lr, loss_fn=loss_fn or default_loss,
                             settings=settings or CUDA_SETTINGS, batch=batch, device_id=device_id)
    return _measure_cpu(build, optimizer=optimizer, lr=lr, loss_fn=loss_fn or default_loss,
                        settings=settings or CPU_SETTINGS, threads=threads, batch=batch)


def _prepare(build: Builder, dev: torch.device, optimizer: str, lr: float, loss_fn
             ) -> tuple[torch.nn.Module, list[torch.Tensor], torch.optim.Optimizer, Callable[[], None],
                        dict[str, Any]]:
    t0 = time.perf_counter()
    module, inputs = build()
    module = module.to(dev).train()
    inputs = [t.to(dev) for t in inputs]
    opt = make_optimizer(optimizer, module.parameters(), lr)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(module(*inputs))
        loss.backward()
        opt.step()

    info = {"build_ms": (time.perf_counter() - t0) * 1e3,
            "params_count": sum(p.numel() for p in module.parameters()),
            "input_shapes": [list(t.shape) for t in inputs],
            "input_dtypes": [str(t.dtype).replace("torch.", "") for t in inputs]}
    return module, inputs, opt, step, info


def _renamed(stats: dict[str, Any]) -> dict[str, Any]:
    return {k.replace("latency_", "step_"): v for k, v in stats.items()}


def _measure_cpu(build, *, optimizer, lr, loss_fn, settings, threads, batch) -> dict[str, Any]:
    if threads is not None:
        torch.set_num_threads(threads)
    prime_cpu()
    common = dict(device="cpu", optimizer=optimizer, lr=lr, batch=batch,
                  threads=torch.get_num_threads(), loss=getattr(loss_fn, "__name__", "custom"),
                  torch_settings=_torch_settings())
    baseline = hostmem.start_baseline()
    notes = [] if baseline is not None else ["VmHWM could not be reset: peak is over the "
                                             "process start"]
    baseline = baseline if baseline is not None else hostmem.rss_kib()
    # what _prepare returns, held here so that `finally` can drop it before collecting
    module: Any = None
    inputs: Any = None
    opt: Any = None
    step: Any = None
    try:
        module, inputs, opt, step, info = _prepare(build, torch.device("cpu"), optimizer, lr,
                                                   loss_fn)
        warmups = warm_up(step, settings)
        samples, wall_ns = timed_loop(step, settings)
        stats = _renamed(latency_stats(samples, wall_ns))
        peak = hostmem.hwm_kib()
        return new_train_record(
            status="ok", **stats, step_wall_ms=stats["step_ms"], warmup_runs=warmups,
            timing="perf_counter", **info,
            peak_mem_mb=(peak - baseline) / 1024 if peak and baseline else None,
            peak_mem_process_mb=peak / 1024 if peak else None,
            peak_mem_method=hostmem.peak_method() if peak else None,  # "vmhwm": glibc's default
            notes=notes, **common)
    except Exception as exc:
        status = "oom" if _is_oom(exc) else "error"
        return new_train_record(status=status, error=f"{type(exc).__name__}: {exc}"[:2000],
                                **common)
    finally:
        module = inputs = opt = step = None  # noqa: F841 - drop references before collecting
        gc.collect()


def _measure_cuda(build, *, optimizer, lr, loss_fn, settings, batch, device_id) -> dict[str, Any]:
    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    dev = torch.device("cuda", device_id)
    prime_cuda(device_id)
    common = dict(device=f"cuda:{device_id}", optimizer=optimizer, lr=lr, batch=batch,
                  loss=getattr(loss_fn, "__name__", "custom"), torch_settings=_torch_settings())
    gpu = nvml.Device(device_id)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)
    # what _prepare returns, held here so that `finally` can drop it before collecting
    module: Any = None
    inputs: Any = None
    opt: Any = None
    step: Any = None
    window = None
    sampler = nvml.MemorySampler(gpu)
    try:
        with sampler:
            module, inputs, opt, step, info = _prepare(build, dev, optimizer, lr, loss_fn)

            def synced_step() -> None:
                step()
                torch.cuda.synchronize(dev)

            warmups = warm_up(synced_step, settings)
            event_ms: list[float] = []

            def timed_step() -> None:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                step()
                end.record()
                end.synchronize()
                event_ms.append(start.elapsed_time(end))

            window = nvml.Window(gpu)
            window.begin()
            host_ns, wall_ns = timed_loop(timed_step, settings)
            counters = window.end(len(host_ns))
        stats = _renamed(latency_stats([int(ms * 1e6) for ms in event_ms], wall_ns))
        return new_train_record(
            status="ok", **stats, **counters, warmup_runs=warmups, timing="cuda_events",
            step_wall_ms=latency_stats(host_ns)["latency_ms"], **info,
            peak_mem_mb=sampler.peak_mb - sampler.baseline_mb,
            peak_mem_process_mb=sampler.peak_mb, peak_mem_method=sampler.method,
            torch_max_allocated_mb=torch.cuda.max_memory_allocated(dev) / 2**20,
            torch_max_reserved_mb=torch.cuda.max_memory_reserved(dev) / 2**20,
            notes=list(window.notes), **common)
    except Exception as exc:
        if window is not None:
            window.close()
        status = "oom" if _is_oom(exc) else "error"
        return new_train_record(status=status, error=f"{type(exc).__name__}: {exc}"[:2000],
                                **common)
    finally:
        module = inputs = opt = step = None  # noqa: F841 - drop references before emptying
        gc.collect()
        torch.cuda.empty_cache()


def finish_train_record(rec: dict[str, Any], device_id: int = 0) -> dict[str, Any]:
    """Add the ``env`` block (perfseer_rt's plus torch, CUDA runtime, cuDNN)."""
    rec["env"] = environment(gpu_index=device_id, **torch_env())
    return rec


# ------------------------------------------------------------ worker process
def resolve_builder(spec: str) -> Callable[[dict, int], tuple[torch.nn.Module, Inputs]]:
    """``"package.module:function"`` -> the function ``(config, batch) -> (module, inputs)``."""
    mod, _, fn = spec.partition(":")
    if not mod or not fn:
        raise ValueError(f"builder {spec!r}: expected 'package.module:function'")
    return getattr(importlib.import_module(mod), fn)


def _handle(req: dict) -> dict:
    builder = resolve_builder(req["builder"])
    config, batch = req["config"], req["batch"]
    return measure_train_step(
        lambda: builder(config, batch), device=req.get("device", "cpu"),
        optimizer=req.get("optimizer", "sgd"), lr=req.get("lr", 1e-3),
        settings=MeasureSettings.from_dict(req.get("settings")) if req.get("settings") else None,
        threads=req.get("threads"), batch=batch, device_id=req.get("device_id", 0))


class TrainWorker:
    """A child process that measures training steps of many models in turn.

    Models are described as JSON (``config``) and built in the child by a
    builder ``"module:function"`` taking ``(config, batch)`` and returning
    ``(module, inputs)``; the default builds zoo configs
    (:func:`training.campaign.zoo_cases.build_train_case`).

    Args:
        device: ``"cpu"`` or ``"cuda"``.
        timeout_s: limit of one measurement (past it: status ``"error"``).
        extra_path: folders put first on the child's PYTHONPATH.
    """

    DEFAULT_BUILDER = "training.campaign.zoo_cases:build_train_case"

    def __init__(self, device: str = "cpu", *, timeout_s: float = 600.0,
                 extra_path: Sequence[str] = ()) -> None:
        self.device = device
        self.timeout_s = timeout_s
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self._child = JsonChild("training.profile_train", extra_path=[*extra_path, root])

    def measure(self, config: dict, batch: int, *, builder: str | None = None,
                optimizer: str = "sgd", lr: float = 1e-3, settings: MeasureSettings | None = None,
                threads: int | None = None, device_id: int = 0,
                timeout_s: float | None = None) -> dict[str, Any]:
        """Measure one step of ``config`` at ``batch``; returns its record (no env)."""
        if not self._child.alive():
            self._child.stop(kill=True)
            self._child.start()
        req = {"op": "measure", "builder": builder or self.DEFAULT_BUILDER, "config": config,
               "batch": batch, "device": self.device, "optimizer": optimizer, "lr": lr,
               "settings": settings.to_dict() if settings else None, "threads": threads,
               "device_id": device_id}
        try:
            return self._child.request(req, timeout_s or self.timeout_s)
        except ChildDied as exc:
            return new_train_record(status="error", error=str(exc), device=self.device,
                                    optimizer=optimizer, lr=lr, batch=batch)

    def close(self) -> None:
        self._child.stop()

    def __enter__(self) -> "TrainWorker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__":
    serve(_handle)
