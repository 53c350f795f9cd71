"""The measurement record: one plain dict per measured configuration.

Every field carries its unit in its name. A field that was not measured (no
GPU, metric unsupported by the driver) is ``None``; a failed run has
``status`` ``"oom"`` or ``"error"`` with the message in ``error`` and no
metric values. Nothing is ever filled with 0 in place of a measurement.

Fields (see :data:`RECORD_FIELDS` for the full order):

- ``status``: ``"ok"``, ``"oom"`` (out of host or device memory) or
  ``"error"`` (unsupported op, session creation failure, crash, timeout).
- ``latency_ms``: median latency of one batch, milliseconds (one
  ``InferenceSession.run`` / ``run_with_iobinding`` call, host clock
  ``time.perf_counter_ns``; the CUDA run is synchronous in onnxruntime).
- ``latency_mean_ms``, ``latency_min_ms``, ``latency_p90_ms``: the same
  samples' mean, minimum and 90th percentile, milliseconds.
- ``latency_cv``: coefficient of variation of the samples, std / mean
  (a fraction, 0.03 = 3 %); ``latency_robust_cv``: 1.4826 * MAD / median,
  insensitive to a few preempted runs.
- ``runs``: number of timed runs; ``window_s``: their total wall time, s.
- ``latency_windows``: timed windows run (a window whose robust CV was over
  ``latency_cv_bound`` is timed again; the steadiest is kept, see
  :func:`perfseer_rt.profile.timing.stable_loop`); ``latency_window_cvs``:
  each window's robust CV; ``latency_stable``: the kept window met the bound
  (None: no bound); when it did not, ``notes`` says so.
- ``warmup_runs``: untimed runs before the window.
- ``session_ms``: wall time to create the session, milliseconds.
- ``peak_mem_mb``: peak memory over the process baseline, MiB (2**20 bytes):
  CPU: peak resident set (VmHWM) of the measuring child process over its
  RSS after importing onnxruntime and before creating the session; CUDA:
  peak NVML device memory of the measuring process over its value before
  creating the session (the CUDA context is in the baseline).
- ``peak_mem_process_mb``: the process's absolute peak, same source, MiB.
- CPU only, the phases of ``peak_mem_mb`` (same baseline, MiB; None where
  the peak cannot be reset): ``load_peak_mb``, the peak while the session is
  created; ``loaded_mb``, what is resident right after; ``run_peak_mb``, the
  peak while it runs. ``peak_mem_mb`` = max(load_peak_mb, run_peak_mb).
- ``peak_mem_method``: how the peak was read (``"vmhwm+mmap64k+fresh"``:
  VmHWM with glibc's mmap threshold fixed at 64 KiB, see
  :mod:`perfseer_rt.profile.hostmem`, the first model of its measuring
  process, as ``perfseer-rt profile`` measures; ``+reused``: after other
  models in the same process; ``"vmhwm+mmap64k"``: not said, as in records
  made before 2026-11-24, mostly reused; ``"vmhwm"``: glibc's default, as in
  records made before 2026-11-21; ``"nvml_process"``, ``"nvml_device_used"``).
- ``sm_util_pct``: mean NVML ``utilization.gpu`` (share of time a kernel ran)
  over the steady window, percent.
- ``proc_sm_util_pct``: mean NVML per-process SM utilization over the
  window, percent.
- ``gpm_sm_active_pct``: GPM ``SM_UTIL`` (share of SMs busy) over the
  window, percent, Hopper and later; ``gpm_sm_occupancy_pct``: GPM
  ``SM_OCCUPANCY`` (active warps over the maximum), percent.
- ``energy_mj``: NVML total-energy counter delta over the window divided by
  the runs in it, millijoules per batch; ``power_w``: mean power over the
  window, watts.
- ``provider_requested`` / ``provider_used``: execution provider asked for
  and the one the session really used (``session.get_providers()[0]``).
- ``provider_options``: effective provider options (strings, as
  onnxruntime reports them); ``threads``: intra-op threads (CPU).
- ``batch``, ``input_shapes`` (name -> list of dims), ``input_dtypes``.
- ``env``: see :func:`perfseer_rt.profile.env.environment`.
- ``notes``: list of strings, e.g. why a GPU metric is ``None``.
"""

from __future__ import annotations

from typing import Any

STATUS_OK = "ok"
STATUS_OOM = "oom"
STATUS_ERROR = "error"
STATUSES = (STATUS_OK, STATUS_OOM, STATUS_ERROR)

RECORD_FIELDS = (
    "status", "error",
    "latency_ms", "latency_mean_ms", "latency_min_ms", "latency_p90_ms", "latency_cv",
    "latency_robust_cv",
    "runs", "window_s", "latency_windows", "latency_window_cvs", "latency_cv_bound", "latency_stable",
    "warmup_runs", "session_ms",
    "peak_mem_mb", "peak_mem_process_mb", "peak_mem_method", "load_peak_mb", "loaded_mb",
    "run_peak_mb",
    "sm_util_pct", "proc_sm_util_pct", "gpm_sm_active_pct", "gpm_sm_occupancy_pct",
    "energy_mj", "power_w",
    "provider_requested", "provider_used", "provider_options", "threads",
    "batch", "input_shapes", "input_dtypes",
    "model", "env", "notes",
)

# Substrings of onnxruntime / CUDA / torch messages that mean "out of memory".
_OOM_MARKERS = (
    "out of memory", "failed to allocate memory", "cudaerrormemoryallocation",
    "cuda failure 2:", "cublas_status_alloc_failed", "cudnn_status_alloc_failed",
    "bad_alloc", "cannot allocate memory", "oom",
)


def new_record(**fields: Any) -> dict[str, Any]:
    """A record with every field of :data:`RECORD_FIELDS`, unset ones ``None``."""
    unknown = set(fields) - set(RECORD_FIELDS)
    if unknown:
        raise KeyError(f"unknown record fields {sorted(unknown)}; see RECORD_FIELDS")
    rec: dict[str, Any] = dict.fromkeys(RECORD_FIELDS)
    rec["notes"] = []
    rec.update(fields)
    return rec


def classify_failure(message: str) -> str:
    """``"oom"`` when an error message says memory ran out, else ``"error"``."""
    text = message.lower()
    return STATUS_OOM if any(m in text for m in _OOM_MARKERS) else STATUS_ERROR


def failure_record(message: str, status: str | None = None, **fields: Any) -> dict[str, Any]:
    """A record for a run that failed: no metric values, the message kept."""
    status = status or classify_failure(message)
    if status not in (STATUS_OOM, STATUS_ERROR):
        raise ValueError(f"status {status!r}: a failure is 'oom' or 'error'")
    return new_record(status=status, error=message.strip()[:2000], **fields)
