"""GPU counters through NVML (the ``pynvml`` module of nvidia-ml-py).

- :class:`MemorySampler`: a background thread that samples the device memory
  of one process (``nvmlDeviceGetComputeRunningProcesses``) and keeps the
  peak, MiB. Where the process is not listed (a PID namespace hides it), it
  samples the device's used memory instead and says so.
- :class:`Window`: counters over a steady window of looped runs: NVML
  ``utilization.gpu`` polled every 50 ms (percent of time a kernel ran),
  per-process SM utilization (``nvmlDeviceGetProcessUtilization``), GPM
  ``SM_UTIL`` and ``SM_OCCUPANCY`` on Hopper and later (two GPM samples
  bracketing the window, > 100 ms apart), and the total-energy counter delta
  (mJ). Samples in the first :data:`LEAD_IN_S` of the window are dropped
  because NVML's sample period (1/6 s to 1 s) may reach back before it.

Nothing here raises for a metric the device does not support: the value is
None and a note says why.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

LEAD_IN_S = 0.2        # utilization samples younger than this into the window are dropped
POLL_S = 0.05          # utilization polling period, seconds
MEM_POLL_S = 0.005     # memory polling period, seconds


def nvml_module() -> Any:
    """Import and initialise pynvml; raises the NVML error when there is no driver."""
    import pynvml  # deliberately lazy: imported (and initialised) only when a GPU is asked for

    pynvml.nvmlInit()
    return pynvml


class Device:
    """One GPU through NVML (index as NVML numbers them)."""

    def __init__(self, index: int = 0) -> None:
        self.nv = nvml_module()
        self.index = index
        self.handle = self.nv.nvmlDeviceGetHandleByIndex(index)
        self.pid = os.getpid()

    def process_mem_mb(self, pid: int | None = None) -> float | None:
        """Device memory used by ``pid`` (default this process), MiB; None if not listed."""
        pid = self.pid if pid is None else pid
        try:
            procs = self.nv.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except self.nv.NVMLError:
            return None
        used = [p.usedGpuMemory for p in procs if p.pid == pid and p.usedGpuMemory is not None]
        return sum(used) / 2**20 if used else None

    def used_mem_mb(self) -> float:
        """Device memory used by all processes, MiB."""
        return float(self.nv.nvmlDeviceGetMemoryInfo(self.handle).used) / 2**20

    def energy_mj(self) -> int | None:
        """Total energy since the driver loaded, millijoules; None if unsupported."""
        try:
            return int(self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except self.nv.NVMLError:
            return None

    def gpu_util_pct(self) -> float | None:
        try:
            return float(self.nv.nvmlDeviceGetUtilizationRates(self.handle).gpu)
        except self.nv.NVMLError:
            return None

    def process_sm_util_pct(self, since_us: int, pid: int | None = None) -> float | None:
        """Mean per-process SM utilization of samples newer than ``since_us``, percent."""
        pid = self.pid if pid is None else pid
        try:
            samples = self.nv.nvmlDeviceGetProcessUtilization(self.handle, since_us)
        except self.nv.NVMLError:
            return None
        vals = [s.smUtil for s in samples if s.pid == pid and s.timeStamp >= since_us]
        return sum(vals) / len(vals) if vals else None

    def gpm_supported(self) -> bool:
        try:
            return bool(self.nv.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice)
        except (self.nv.NVMLError, AttributeError):
            return False


class MemorySampler:
    """Peak device memory of this process, sampled on a background thread.

    Use as a context manager; ``peak_mb`` is the highest sample (MiB) and
    ``method`` is ``"nvml_process"`` or ``"nvml_device_used"``.
    """

    def __init__(self, device: Device, interval_s: float = MEM_POLL_S) -> None:
        self.device = device
        self.interval_s = interval_s
        self.method = "nvml_process" if device.process_mem_mb() is not None else "nvml_device_used"
        self.baseline_mb = self.sample()
        self.peak_mb = self.baseline_mb
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nvml-mem", daemon=True)

    def sample(self) -> float:
        if self.method == "nvml_process":
            v = self.device.process_mem_mb()
            return v if v is not None else 0.0  # process gone from the list: nothing held
        return self.device.used_mem_mb()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            v = self.sample()
            if v > self.peak_mb:
                self.peak_mb = v

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        v = self.sample()
        if v > self.peak_mb:
            self.peak_mb = v


class Window:
    """NVML counters over a window of looped runs: ``begin()``, runs, ``end(runs)``."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.notes: list[str] = []
        self._util: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gpm = device.gpm_supported()
        self._gpm_samples: list[Any] = []
        if not self._gpm:
            self.notes.append("GPM not supported on this device/driver")

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            v = self.device.gpu_util_pct()
            if v is not None:
                self._util.append((time.monotonic(), v))

    def begin(self) -> None:
        nv = self.device.nv
        self.t0 = time.monotonic()
        self.t0_us = int(time.time() * 1e6)
        self.e0 = self.device.energy_mj()
        if self._gpm:
            try:
                s1, s2 = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
                nv.nvmlGpmSampleGet(self.device.handle, s1)
                self._gpm_samples = [s1, s2]
            except Exception as exc:  # noqa: BLE001 - NVMLError, or a pynvml build without GPM: no GPM, say so
                self.notes.append(f"GPM sample failed: {type(exc).__name__}: {exc}")
                self._gpm = False
        self._thread = threading.Thread(target=self._poll, name="nvml-util", daemon=True)
        self._thread.start()

    def end(self, runs: int) -> dict[str, Any]:
        """Stop the window; returns the record's GPU counter fields.

        Keys: sm_util_pct, proc_sm_util_pct, gpm_sm_active_pct,
        gpm_sm_occupancy_pct, energy_mj (per run), power_w.
        """
        nv = self.device.nv
        t1 = time.monotonic()
        e1 = self.device.energy_mj()
        out: dict[str, Any] = dict.fromkeys(("sm_util_pct", "proc_sm_util_pct",
                                             "gpm_sm_active_pct", "gpm_sm_occupancy_pct",
                                             "energy_mj", "power_w"))
        if self._gpm and self._gpm_samples:
            out.update(self._gpm_metrics(nv))
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        window_s = t1 - self.t0
        util = [v for t, v in self._util if self.t0 + LEAD_IN_S <= t <= t1]
        if util:
            out["sm_util_pct"] = sum(util) / len(util)
        else:
            self.notes.append(f"no NVML utilization sample in a {window_s:.2f} s window")
        out["proc_sm_util_pct"] = self.device.process_sm_util_pct(
            self.t0_us + int(LEAD_IN_S * 1e6))
        if self.e0 is not None and e1 is not None and runs > 0 and e1 > self.e0:
            out["energy_mj"] = (e1 - self.e0) / runs
            out["power_w"] = (e1 - self.e0) / 1e3 / window_s if window_s > 0 else None
        else:
            self.notes.append("NVML total-energy counter unavailable or did not advance")
        return out

    def close(self) -> None:
        """Stop polling and free GPM samples (after a failed window)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for s in self._gpm_samples:
            try:
                self.device.nv.nvmlGpmSampleFree(s)
            except self.device.nv.NVMLError:
                pass
        self._gpm_samples = []

    def _gpm_metrics(self, nv: Any) -> dict[str, Any]:
        s1, s2 = self._gpm_samples
        out: dict[str, Any] = {}
        try:
            elapsed = time.monotonic() - self.t0
            if elapsed < 0.11:  # GPM needs samples more than 100 ms apart
                time.sleep(0.11 - elapsed)
            nv.nvmlGpmSampleGet(self.device.handle, s2)
            mg = nv.c_nvmlGpmMetricsGet_t()
            mg.version = nv.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = 2
            mg.sample1, mg.sample2 = s1, s2
            mg.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_UTIL
            mg.metrics[1].metricId = nv.NVML_GPM_METRIC_SM_OCCUPANCY
            nv.nvmlGpmMetricsGet(mg)
            for i, key in ((0, "gpm_sm_active_pct"), (1, "gpm_sm_occupancy_pct")):
                if mg.metrics[i].nvmlReturn == nv.NVML_SUCCESS:
                    out[key] = float(mg.metrics[i].value)
                else:
                    self.notes.append(f"GPM metric {key} returned {mg.metrics[i].nvmlReturn}")
        except Exception as exc:  # noqa: BLE001 - NVMLError, or a pynvml whose GPM structs differ
            self.notes.append(f"GPM metrics failed: {type(exc).__name__}: {exc}")
        finally:
            for s in (s1, s2):
                try:
                    nv.nvmlGpmSampleFree(s)
                except Exception:  # noqa: BLE001, S110 - freeing is best effort
                    pass
            self._gpm_samples = []
        return out
