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

#: The installed distribution's version ("0.0.0" from a source tree without
#: an install); looked up on first use (a few ms that a start need not pay).
__version__: str

__all__ = ["PerfGraph", "PerfSeerError", "extract", "predict", "__version__"]


def __getattr__(name: str) -> ModuleType | str:
    """``perfseer_rt.predict`` and ``__version__``, on first use: extracting
    (and the CLI's ``extract``) loads no predictor code (PEP 562)."""
    if name == "predict":
        return importlib.import_module("perfseer_rt.predict")
    if name == "__version__":
        try:
            found = version("perfseer-rt")
        except PackageNotFoundError:  # running from a source tree without install
            found = "0.0.0"
        globals()["__version__"] = found
        return found
    raise AttributeError(f"module 'perfseer_rt' has no attribute {name!r}")
