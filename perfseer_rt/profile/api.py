"""``profile()``: measure one ONNX model on the CPU or a CUDA GPU.

The library entry point behind ``perfseer-rt profile``. It checks the request
in this process (provider known and available, GPU visible, model file
present) so that user errors raise at once, then measures in a child process
(:class:`perfseer_rt.profile.worker.ProfileWorker`) and adds the ``env``
block. For many models in a row, hold one ``ProfileWorker`` and call
:func:`finish_record` on each of its records.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Mapping, Sequence

import onnx

from perfseer_rt.errors import DeviceError, ShapeError
from perfseer_rt.graph import resolve_input_shapes
from perfseer_rt.graph.switches import named_switches
from perfseer_rt.model_file import check_model_file
from perfseer_rt.profile.env import environment
from perfseer_rt.profile.nvml import Device
from perfseer_rt.profile.session import check_provider_available, provider_name
from perfseer_rt.profile.timing import MeasureSettings
from perfseer_rt.profile.worker import DEFAULT_TIMEOUT_S, ProfileWorker


def check_cuda(device_id: int = 0) -> None:
    """Raise DeviceError unless the CUDA provider exists and NVML sees a GPU."""
    check_provider_available("cuda")
    try:
        Device(device_id)
    except Exception as exc:
        raise DeviceError(f"CUDA was requested but no NVIDIA GPU {device_id} is visible "
                          f"({type(exc).__name__}: {exc}); use --provider cpu") from None


def finish_record(rec: dict[str, Any], device_id: int = 0, **env_extra: Any) -> dict[str, Any]:
    """Add the ``env`` block (see :func:`perfseer_rt.profile.env.environment`)."""
    rec["env"] = environment(gpu_index=device_id, **env_extra)
    return rec


def _check_switches(path: str, dims: Mapping[str, int]) -> None:
    """The profiler feeds a bool input True and an integer one random values
    (:func:`perfseer_rt.profile.inputs.random_tensor`): a switch input named
    in ``dims`` (:mod:`perfseer_rt.graph.switches`, which a prediction takes
    the value of) is measured as asked only as a bool set to 1; any other is
    refused rather than measured on another path than predicted.

    Raises:
        ShapeError: a switch input named with a value the profiler cannot feed.
    """
    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception:  # noqa: BLE001 - not readable: the worker reports it as before
        return
    for name, (elem, value) in named_switches(proto, dims).items():
        if not (elem == onnx.TensorProto.BOOL and value == 1):
            raise ShapeError(f"--dim {name}={value}: the profiler feeds the switch input "
                             f"{name!r} {'True' if elem == onnx.TensorProto.BOOL else 'random values'}"
                             f" and cannot measure it at {value} (predict takes the value)")


def profile(model: str | os.PathLike[str] | bytes, provider: str = "cpu", *,
            batch: int | None = None,
            input_shapes: Mapping[str, Sequence[int]] | None = None,
            dims: Mapping[str, int] | None = None,
            threads: int = 1, settings: MeasureSettings | None = None,
            provider_options: Mapping[str, Any] | None = None, device_id: int = 0,
            timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Measure the inference of one model; returns its record.

    Args:
        model: ONNX file path or bytes.
        provider: ``"cpu"`` (CPU execution provider, ``threads`` intra-op
            threads) or ``"cuda"`` (CUDA provider with IO binding).
        batch: batch size for a dynamic first input dim.
        input_shapes: explicit shapes by input name.
        dims: values of symbolic dims by name; with them the input shapes
            are resolved as a prediction resolves them
            (:func:`perfseer_rt.graph.resolve_input_shapes`: the dims the
            model implies too), so a measurement runs what was predicted.
        settings: warm-up and window; defaults: CPU >= 10 runs and >= 0.5 s,
            CUDA >= 10 runs and >= 1 s.
        provider_options: CUDA provider options (cudnn_conv_algo_search,
            use_tf32, arena_extend_strategy, ...).
        timeout_s: limit for the measurement, seconds.

    Returns:
        The record described in :mod:`perfseer_rt.profile.record`: status
        ``"ok"`` with metrics, or ``"oom"``/``"error"`` with the message.

    Raises:
        DeviceError: unknown provider, provider missing from this onnxruntime,
            no GPU, or a CUDA session that fell back to the CPU.
        ModelLoadError: no model file there (or not a regular file).
        ShapeError: a dynamic input dim nothing resolves.
    """
    name = provider_name(provider)
    key = "cuda" if name == "CUDAExecutionProvider" else "cpu"
    if key == "cuda":
        check_cuda(device_id)
    else:
        check_provider_available(key)
    tmp = None
    try:
        if isinstance(model, (bytes, bytearray)):
            fd, tmp = tempfile.mkstemp(suffix=".onnx", prefix="perfseer-profile-")
            with os.fdopen(fd, "wb") as f:
                f.write(model)
            path = tmp
        else:
            path = os.fspath(model)
            check_model_file(path)
        if dims:
            _check_switches(path, dims)
            input_shapes = resolve_input_shapes(
                path, batch, {k: tuple(v) for k, v in (input_shapes or {}).items()}, dict(dims))
        with ProfileWorker(key, timeout_s=timeout_s) as worker:
            rec = worker.measure(path, batch=batch, input_shapes=input_shapes,
                                 threads=threads, settings=settings,
                                 provider_options=provider_options, device_id=device_id)
    finally:
        if tmp:
            os.unlink(tmp)
    if tmp:
        rec["model"] = "<bytes>"
    if rec.get("provider_requested") is None:
        rec["provider_requested"] = name
    return finish_record(rec, device_id)
