"""perfseer-rt: predict how an ONNX model performs before it runs.

The public API is small: :func:`extract` turns an ONNX model into a
:class:`PerfGraph`; :func:`perfseer_rt.predict.predict` predicts its metrics,
:func:`check` answers "does it meet this budget?" and :func:`fit` "what is
the largest batch that fits?". The profiler lives in
:mod:`perfseer_rt.profile`. Nothing here imports torch (nor onnxruntime until
a prediction runs).
"""

import importlib
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.graph import PerfGraph, extract

try:
    __version__ = version("perfseer-rt")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0"

__all__ = ["PerfGraph", "PerfSeerError", "extract", "predict", "__version__"]


def __getattr__(name: str) -> ModuleType:
    """``perfseer_rt.predict``, imported on first use: extracting (and the
    CLI's ``extract``) loads no predictor code (PEP 562)."""
    if name == "predict":
        return importlib.import_module("perfseer_rt.predict")
    raise AttributeError(f"module 'perfseer_rt' has no attribute {name!r}")
