"""The environment block stored with every measurement record.

:func:`environment` returns plain JSON-able data: host, CPU, GPU (through
NVML when a driver is present), library versions and a UTC timestamp. The
static part is read once per process and cached.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import socket
import sys
from importlib.metadata import version
from typing import Any

import numpy
import onnx


def cpu_model() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def cpu_signature() -> dict[str, Any]:
    """Vendor, family, model, stepping, L2 size (KiB) and ISA level of the CPU.

    ``cpu_model`` alone does not tell CPUs apart in a VM ("AMD EPYC" covers
    several generations): the signature does. Values are None where
    ``/proc/cpuinfo`` lacks them.
    """
    keys = {"vendor_id": "cpu_vendor", "cpu family": "cpu_family", "model": "cpu_model_id",
            "stepping": "cpu_stepping", "cache size": "cpu_cache_kb"}
    sig: dict[str, Any] = dict.fromkeys(keys.values())
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                name, _, value = line.partition(":")
                name, value = name.strip().lower(), value.strip()
                if name in keys:
                    sig[keys[name]] = value.split()[0] if value else None
                elif name == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    isa = [f for f in ("avx512_bf16", "avx512_vnni", "avx512f", "avx2", "avx") if f in flags]
    sig["cpu_isa"] = isa[0] if isa else None
    return sig


def gpu_info(index: int = 0) -> dict[str, Any]:
    """GPU name, driver, CUDA driver version and memory through NVML.

    Every value is None when NVML or the driver is missing.
    """
    info: dict[str, Any] = dict.fromkeys(
        ("gpu_name", "gpu_driver", "cuda_version", "gpu_memory_mb", "gpu_count",
         "gpu_compute_capability", "gpu_mig_mode", "gpu_power_limit_w"))
    try:
        import pynvml as nv  # deliberately lazy: NVML only where a GPU is described

        nv.nvmlInit()
    except Exception:  # no driver, no library: no GPU information
        return info
    try:
        info["gpu_count"] = nv.nvmlDeviceGetCount()
        h = nv.nvmlDeviceGetHandleByIndex(index)
        info["gpu_name"] = _str(nv.nvmlDeviceGetName(h))
        info["gpu_driver"] = _str(nv.nvmlSystemGetDriverVersion())
        cuda = nv.nvmlSystemGetCudaDriverVersion()
        info["cuda_version"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
        info["gpu_memory_mb"] = nv.nvmlDeviceGetMemoryInfo(h).total / 2**20
        for key, call in (("gpu_compute_capability",
                           lambda: ".".join(map(str, nv.nvmlDeviceGetCudaComputeCapability(h)))),
                          ("gpu_mig_mode", lambda: nv.nvmlDeviceGetMigMode(h)[0]),
                          ("gpu_power_limit_w",
                           lambda: nv.nvmlDeviceGetPowerManagementLimit(h) / 1000.0)):
            try:
                info[key] = call()
            except Exception:  # not supported on this device: leave None
                pass
    except Exception:
        pass
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass
    return info


def _str(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _version(module: str) -> str | None:
    try:
        return version(module)
    except Exception:
        mod = sys.modules.get(module)
        return getattr(mod, "__version__", None)


@functools.lru_cache(maxsize=4)
def _static(gpu_index: int) -> tuple[tuple[str, Any], ...]:
    import onnxruntime  # deliberately lazy: onnxruntime is optional for graph-only use (perfseer_rt.install)

    env: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        **cpu_signature(),
        "cpu_cores": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python_version": platform.python_version(),
        "onnxruntime_version": onnxruntime.__version__,
        "onnxruntime_package": next((p for p in ("onnxruntime-gpu", "onnxruntime")
                                     if _version(p) == onnxruntime.__version__), None),
        "onnx_version": onnx.__version__,
        "numpy_version": numpy.__version__,
    }
    env.update(gpu_info(gpu_index))
    return tuple(env.items())


def environment(gpu_index: int | None = 0, **extra: Any) -> dict[str, Any]:
    """The environment block of a record.

    Keys: hostname, platform, cpu_model, the keys of :func:`cpu_signature`
    (cpu_vendor, cpu_family, cpu_model_id, cpu_stepping, cpu_cache_kb,
    cpu_isa), cpu_cores, cpu_affinity,
    python_version, onnxruntime_version, onnxruntime_package, onnx_version,
    numpy_version, gpu_name, gpu_driver, cuda_version (driver's CUDA version
    from NVML), gpu_memory_mb (MiB), gpu_count, gpu_compute_capability,
    gpu_mig_mode, gpu_power_limit_w, timestamp_utc (ISO 8601), plus ``extra``
    (e.g. torch_version). GPU keys are None without an NVIDIA driver.
    """
    env = dict(_static(gpu_index if gpu_index is not None else 0))
    env.update(extra)
    env["timestamp_utc"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return env
