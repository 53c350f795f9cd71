"""CUDA inference measurement, run inside the measuring (child) process.

onnxruntime's CUDA execution provider with IO binding: inputs are copied to
the device once (``OrtValue.ortvalue_from_numpy(x, "cuda", id)``) and outputs
are bound to the device, so a timed run moves no data over PCIe. Warm-up
runs use the exact shapes (cuDNN's algorithm search happens there). The
timed runs double as the steady window for NVML utilization, GPM SM
activity and energy (``MeasureSettings.min_time_s`` >= 1 s). Peak memory is
sampled from NVML on a background thread during session creation, warm-up
and the window, over the process's memory just before the session (the CUDA
context, created once per process by :func:`ensure_context`, is in that
baseline; ``peak_mem_process_mb`` includes it).
"""

from __future__ import annotations

import dataclasses
import gc
import time
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from perfseer_rt.errors import DeviceError, PerfSeerError
from perfseer_rt.profile import nvml
from perfseer_rt.profile.inputs import make_inputs
from perfseer_rt.profile.record import STATUS_OK, failure_record, new_record
from perfseer_rt.profile.session import build_session, provider_name
from perfseer_rt.profile.timing import PRESETS, MeasureSettings, latency_stats, stable_loop, warm_up

_context_ready: set[int] = set()


def tiny_conv_model(opset: int = 17) -> bytes:
    """A small Conv + Relu model (1x3x32x32 -> 1x8x32x32) used to prove CUDA runs."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "tiny_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 32, 32])],
        initializer=[w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def ensure_context(device_id: int = 0, provider_options: Mapping[str, Any] | None = None) -> None:
    """Create the CUDA context and load the CUDA libraries once per process.

    Runs the tiny Conv model once so that the baseline of every later
    measurement already holds the context; raises DeviceError when CUDA does
    not attach.
    """
    if device_id in _context_ready:
        return
    opts = {**(provider_options or {}), "device_id": device_id}
    handle = build_session(tiny_conv_model(), "cuda", threads=None, provider_options=opts)
    sess = handle.session
    sess.run(None, {"x": np.ones((1, 3, 32, 32), np.float32)})
    del sess, handle
    gc.collect()
    _context_ready.add(device_id)


def bind_device(session: Any, feeds: Mapping[str, Any], device_id: int = 0) -> Any:
    """An IO binding with every input copied to and every output bound on the GPU."""
    import onnxruntime as ort  # deliberately lazy: onnxruntime is optional for graph-only use (perfseer_rt.install)

    iob = session.io_binding()
    values = {}
    for name, arr in feeds.items():
        values[name] = ort.OrtValue.ortvalue_from_numpy(arr, "cuda", device_id)
        iob.bind_ortvalue_input(name, values[name])
    for out in session.get_outputs():
        iob.bind_output(out.name, "cuda", device_id)
    return iob, values


def measure_cuda(model: str, *, batch: int | None = None,
                 input_shapes: Mapping[str, Sequence[int]] | None = None,
                 settings: MeasureSettings | None = None,
                 provider_options: Mapping[str, Any] | None = None,
                 device_id: int = 0) -> dict[str, Any]:
    """Measure one model on the CUDA provider in this process.

    Returns a record (see :mod:`perfseer_rt.profile.record`) with latency,
    peak device memory, NVML utilization, GPM SM activity and energy; an
    out-of-memory or load failure gives status ``"oom"``/``"error"``.

    Raises:
        DeviceError: no NVIDIA driver, CUDA provider missing, or the session
            fell back to the CPU.
    """
    settings = settings or PRESETS["cuda"]
    opts = {**(provider_options or {}), "device_id": device_id}
    common: dict[str, Any] = dict(provider_requested=provider_name("cuda"), batch=batch, model=str(model))
    try:
        device = nvml.Device(device_id)
    except Exception as exc:
        raise DeviceError(f"NVML cannot see GPU {device_id} ({exc}); the CUDA provider needs "
                          "an NVIDIA driver") from None
    ensure_context(device_id, opts)
    handle = session = feeds = iob = values = None
    window = None
    sampler = nvml.MemorySampler(device)
    try:
        with sampler:
            t0 = time.perf_counter()
            handle = build_session(model, "cuda", threads=None, provider_options=opts)
            session_ms = (time.perf_counter() - t0) * 1e3
            session = handle.session
            feeds = make_inputs(session, batch=batch, input_shapes=input_shapes)
            iob, values = bind_device(session, feeds, device_id)
            run = lambda: session.run_with_iobinding(iob)  # noqa: E731
            warmups = warm_up(run, settings)
            window = nvml.Window(device)
            window.begin()
            # one window only: the NVML window spans the timed runs, so a noisy one is
            # reported (latency_stable, a note), not timed again
            samples, wall_ns, stability = stable_loop(run, dataclasses.replace(settings, retries=0))
            counters = window.end(len(samples))
        rec = new_record(
            status=STATUS_OK, **latency_stats(samples, wall_ns), warmup_runs=warmups,
            session_ms=session_ms, **counters,
            peak_mem_mb=sampler.peak_mb - sampler.baseline_mb,
            peak_mem_process_mb=sampler.peak_mb, peak_mem_method=sampler.method,
            provider_used=handle.provider_used, provider_options=handle.provider_options,
            input_shapes={k: list(v.shape) for k, v in feeds.items()},
            input_dtypes={k: str(v.dtype) for k, v in feeds.items()},
            **{k: v for k, v in stability.items() if k != "notes"},
            notes=list(window.notes) + stability["notes"], **common)
    except PerfSeerError:
        raise
    except Exception as exc:  # OOM, unsupported op, load failure: record it
        rec = failure_record(f"{type(exc).__name__}: {exc}", **common)
        if handle is not None:
            rec["provider_used"] = handle.provider_used
            rec["provider_options"] = handle.provider_options
        if window is not None:
            window.close()
    finally:
        iob = values = session = handle = feeds = None  # noqa: F841 - release before gc
        gc.collect()
    return rec
