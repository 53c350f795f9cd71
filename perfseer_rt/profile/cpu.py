"""CPU inference measurement, run inside the measuring (child) process.

onnxruntime's CPU execution provider with an explicit intra-op thread count
(1 by default), inter-op 1, sequential execution. Latency: warm-up, then
timed runs until the minimum count and window are both reached. Peak memory:
``VmHWM`` of this process over its RSS at the start (after onnxruntime was
imported, before the session), with the high-water mark reset through
``/proc/self/clear_refs`` so that one worker can measure many models; the
run phase's peak is read after the warm-up and one more run, before the
timed loop (whose samples are the profiler's memory, not the model's). Call
it through :mod:`perfseer_rt.profile.api`, which runs it in a child process.
"""

from __future__ import annotations

import gc
import time
from typing import Any, Mapping, Sequence

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.profile import hostmem
from perfseer_rt.profile.inputs import make_inputs
from perfseer_rt.profile.record import STATUS_OK, failure_record, new_record
from perfseer_rt.profile.session import build_session, provider_name
from perfseer_rt.profile.timing import PRESETS, MeasureSettings, latency_stats, stable_loop, warm_up


def measure_cpu(model: str, *, batch: int | None = None,
                input_shapes: Mapping[str, Sequence[int]] | None = None,
                threads: int = 1, settings: MeasureSettings | None = None,
                baseline_kib: int | None = None, fresh_process: bool | None = None) -> dict[str, Any]:
    """Measure one model on the CPU provider in this process.

    Args:
        model: path to the ONNX file.
        batch, input_shapes: see :func:`perfseer_rt.profile.inputs.resolve_shapes`.
        threads: intra-op threads (default 1).
        settings: warm-up and window (defaults of :class:`MeasureSettings`).
        baseline_kib: RSS baseline taken by the caller; when None one is
            taken here (resetting the high-water mark).
        fresh_process: whether this is the first model the process measures
            (named in ``peak_mem_method``; see :func:`perfseer_rt.profile.hostmem.peak_method`).

    Returns:
        A record (see :mod:`perfseer_rt.profile.record`); a model that fails
        to load or run gives status ``"error"``/``"oom"``. User errors
        (unknown provider, unresolved shapes) raise PerfSeerError.
    """
    settings = settings or PRESETS["cpu"]
    common: dict[str, Any] = dict(provider_requested=provider_name("cpu"), threads=threads, batch=batch,
                  model=str(model))
    hostmem.fix_mmap_threshold()  # no-op in the worker's child: fixed at its start-up
    if baseline_kib is None:
        baseline_kib = hostmem.start_baseline()
    notes: list[str] = []
    if baseline_kib is None:
        notes.append("VmHWM could not be reset: peak is over the process start")
        baseline_kib = hostmem.rss_kib()
    handle = session = feeds = None
    try:
        t0 = time.perf_counter()
        handle = build_session(model, "cpu", threads=threads)
        session_ms = (time.perf_counter() - t0) * 1e3
        session = handle.session
        # the two phases of the peak: creating the session (model bytes,
        # initializers, pre-packed weights) and running it (what stays
        # resident plus the arena); the peak is the larger of the two
        resident = hostmem.rss_kib()
        load_peak = hostmem.hwm_kib()  # read second: VmHWM includes the RSS now, so >= resident
        phases = hostmem.reset_hwm()
        feeds = make_inputs(session, batch=batch, input_shapes=input_shapes)
        live, inputs = handle.session, feeds

        def run() -> object:
            return live.run(None, inputs)

        warmups = warm_up(run, settings)
        run()  # the first run allocates tensor by tensor, later ones onnxruntime's planned block
        # the run phase's peak is read before the timed loop: the loop keeps one
        # sample per run (46,762 runs of a tiny MLP in 0.5 s added 1.9 MiB), and
        # that bookkeeping is the profiler's, not the model's
        run_peak = hostmem.hwm_kib()
        samples, wall_ns, stability = stable_loop(run, settings)  # timed again while too noisy
        peak = max(load_peak or 0, run_peak or 0) or None

        def over(kib: int | None) -> float | None:
            return (kib - baseline_kib) / 1024 if kib and baseline_kib and phases else None

        rec = new_record(
            status=STATUS_OK, **latency_stats(samples, wall_ns), warmup_runs=warmups,
            session_ms=session_ms,
            peak_mem_mb=(peak - baseline_kib) / 1024 if peak and baseline_kib else None,
            peak_mem_process_mb=peak / 1024 if peak else None,
            peak_mem_method=hostmem.peak_method(fresh_process) if peak else None,
            load_peak_mb=over(load_peak), loaded_mb=over(resident), run_peak_mb=over(run_peak),
            provider_used=handle.provider_used, provider_options=handle.provider_options,
            input_shapes={k: list(v.shape) for k, v in feeds.items()},
            input_dtypes={k: str(v.dtype) for k, v in feeds.items()},
            **{k: v for k, v in stability.items() if k != "notes"},
            notes=notes + stability["notes"], **common)
    except PerfSeerError:
        raise
    except MemoryError as exc:
        rec = failure_record(f"MemoryError: {exc}", status="oom", **common)
    except Exception as exc:  # onnxruntime load/run failure: record it
        rec = failure_record(f"{type(exc).__name__}: {exc}", **common)
        if handle is not None:
            rec["provider_used"] = handle.provider_used
    finally:
        session = handle = feeds = None
        gc.collect()
    return rec
