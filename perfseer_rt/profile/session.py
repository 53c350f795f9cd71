"""The one place that builds onnxruntime sessions for measurement.

:func:`build_session` checks the requested provider against
``onnxruntime.get_available_providers()``, sets the session options (thread
counts, sequential execution, full graph optimization), and reports the
provider the session actually uses (``session.get_providers()[0]``). When
CUDA was asked for and onnxruntime silently fell back to the CPU (it does so
when the CUDA libraries cannot be loaded), it raises :class:`DeviceError`
(``strict=True``) or warns.
"""

from __future__ import annotations

import ctypes
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

from perfseer_rt.errors import DeviceError
from perfseer_rt.model_file import check_model_file

PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
}

# CUDA provider options set by default: onnxruntime's own defaults, written
# out so that every record states them.
DEFAULT_CUDA_OPTIONS = {
    "device_id": "0",
    "cudnn_conv_algo_search": "EXHAUSTIVE",
    "use_tf32": "1",
    "arena_extend_strategy": "kNextPowerOfTwo",
    "do_copy_in_default_stream": "1",
}

# Effective options copied into records (onnxruntime reports many more).
RECORDED_OPTIONS = (
    "device_id", "cudnn_conv_algo_search", "use_tf32", "arena_extend_strategy",
    "do_copy_in_default_stream", "gpu_mem_limit", "cudnn_conv_use_max_workspace",
    "cudnn_conv1d_pad_to_nc1d", "enable_cuda_graph", "prefer_nhwc", "use_ep_level_unified_stream",
    "tunable_op_enable", "enable_skip_layer_norm_strict_mode",
)


@dataclass
class SessionHandle:
    """A built session and what it really runs on.

    Attributes:
        session: the ``onnxruntime.InferenceSession``.
        provider_requested: e.g. ``"CUDAExecutionProvider"``.
        provider_used: ``session.get_providers()[0]``.
        provider_options: effective options of the used provider (strings).
        threads: intra-op thread count (None: onnxruntime's default).
    """

    session: Any
    provider_requested: str
    provider_used: str
    provider_options: dict[str, str] = field(default_factory=dict)
    threads: int | None = None


def provider_name(provider: str) -> str:
    """Map ``"cpu"``/``"cuda"`` (or a full provider name) to the onnxruntime name."""
    key = provider.lower()
    if key in PROVIDERS:
        return PROVIDERS[key]
    if provider in PROVIDERS.values():
        return provider
    raise DeviceError(f"unknown provider {provider!r}; choose one of "
                      f"{', '.join(sorted(PROVIDERS))}")


def check_provider_available(provider: str) -> str:
    """The onnxruntime name of ``provider``; DeviceError when this build lacks it."""
    import onnxruntime as ort  # deliberately lazy: onnxruntime is optional for graph-only use (perfseer_rt.install)

    name = provider_name(provider)
    available = ort.get_available_providers()
    if name not in available:
        raise DeviceError(
            f"provider {provider!r} ({name}) is not in this onnxruntime build "
            f"({ort.__version__}: {', '.join(available)}); for CUDA install onnxruntime-gpu")
    return name


# CUDA 13 / cuDNN 9 libraries the CUDA provider needs, relative to a
# site-packages folder holding NVIDIA's pip packages (onnxruntime's own list is
# used when it offers one); loaded in this order (cublasLt before cublas).
_NVIDIA_LIBS = (
    ("nvidia", "cu13", "lib", "libcublasLt.so.13"), ("nvidia", "cu13", "lib", "libcublas.so.13"),
    ("nvidia", "cu13", "lib", "libnvrtc.so.13"), ("nvidia", "cu13", "lib", "libcurand.so.10"),
    ("nvidia", "cu13", "lib", "libcufft.so.12"), ("nvidia", "cu13", "lib", "libcudart.so.13"),
    ("nvidia", "cudnn", "lib", "libcudnn.so.9"),
)


def preload_cuda_libraries() -> list[str]:
    """Load the CUDA/cuDNN libraries from NVIDIA's pip packages on ``sys.path``.

    onnxruntime's ``preload_dlls`` looks only next to onnxruntime itself; on a
    machine where onnxruntime-gpu was installed into a separate folder (the
    GPU machine: ``pip install --target``) the NVIDIA packages sit in the
    image's site-packages instead. Each library found on any ``sys.path``
    entry is loaded globally, so the CUDA provider's own ``dlopen`` by name
    finds it. Returns the paths loaded (empty where none are found, e.g.
    when they are on the loader path already).
    """
    import onnxruntime as ort  # deliberately lazy: onnxruntime is optional for graph-only use (perfseer_rt.install)

    try:
        rel = [tuple(r) for r in ort._get_nvidia_dll_paths(False, True, True)]
    except Exception:  # private helper absent in this onnxruntime version
        rel = list(_NVIDIA_LIBS)
    loaded: list[str] = []
    for parts in rel:
        for base in sys.path:
            path = os.path.join(base or ".", *parts)
            if os.path.isfile(path):
                try:
                    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                    loaded.append(path)
                except OSError:
                    continue
                break
    return loaded


def build_session(model: str | os.PathLike[str] | bytes, provider: str = "cpu", *,
                  threads: int | None = 1, provider_options: dict[str, Any] | None = None,
                  strict: bool = True, log_severity: int = 3) -> SessionHandle:
    """Build an ``InferenceSession`` for measurement.

    Args:
        model: path to an ONNX file, or its bytes.
        provider: ``"cpu"`` or ``"cuda"`` (or the full provider name).
        threads: intra-op threads (default 1; None keeps onnxruntime's
            default). Inter-op threads are always 1, execution sequential.
        provider_options: CUDA options merged over :data:`DEFAULT_CUDA_OPTIONS`.
        strict: raise DeviceError when the requested provider did not attach
            (else warn).
        log_severity: onnxruntime log level (3 = errors only).

    Raises:
        DeviceError: unknown or unavailable provider, or (strict) a CUDA
            session that fell back to the CPU.
        ModelLoadError: no model file there (or not a regular file).
        Exception: onnxruntime's own error when the model cannot be loaded
            (callers record it as a failed run).
    """
    import onnxruntime as ort  # deliberately lazy: onnxruntime is optional for graph-only use (perfseer_rt.install)

    name = check_provider_available(provider)
    if isinstance(model, (str, os.PathLike)):
        check_model_file(model)
    so = ort.SessionOptions()
    so.log_severity_level = log_severity
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.inter_op_num_threads = 1
    if threads is not None:
        if threads < 1:
            raise DeviceError(f"threads={threads}: give 1 or more intra-op threads")
        so.intra_op_num_threads = threads
    if name == PROVIDERS["cuda"]:
        preload_cuda_libraries()
        opts = {**DEFAULT_CUDA_OPTIONS, **{k: str(v) for k, v in (provider_options or {}).items()}}
        providers: list[Any] = [(name, opts), "CPUExecutionProvider"]
    else:
        providers = [name]
    src = os.fspath(model) if isinstance(model, (str, os.PathLike)) else model
    sess = ort.InferenceSession(src, so, providers=providers)
    used = sess.get_providers()[0]
    if used != name:
        msg = (f"{name} was requested but the session runs on {used} (onnxruntime fell back; "
               "check the CUDA/cuDNN libraries and the driver)")
        if strict:
            raise DeviceError(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
    effective = sess.get_provider_options().get(used, {})
    recorded = {k: str(effective[k]) for k in RECORDED_OPTIONS if k in effective}
    return SessionHandle(session=sess, provider_requested=name, provider_used=used,
                         provider_options=recorded, threads=threads)
