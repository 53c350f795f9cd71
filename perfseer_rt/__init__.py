"""perfseer-rt: predict how an ONNX model performs before it runs.

The public API is small: :func:`extract` turns an ONNX model into a
:class:`PerfGraph`; predictors and the profiler live in their own
subpackages. Nothing here imports torch.
"""

from importlib.metadata import PackageNotFoundError, version

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.graph import PerfGraph, extract

try:
    __version__ = version("perfseer-rt")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0"

__all__ = ["PerfGraph", "PerfSeerError", "extract", "__version__"]
