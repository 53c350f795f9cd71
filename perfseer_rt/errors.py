"""The small exception family of perfseer-rt.

Every error that a user can cause derives from :class:`PerfSeerError`; the CLI
prints ``perfseer-rt: error: <message>`` on one line and exits with code 2.
Messages name the bad value and, where there is one, the next step.
"""

from __future__ import annotations


class PerfSeerError(Exception):
    """Base class: a problem with the user's input or environment."""


class OptionError(PerfSeerError):
    """An option has a bad value (a malformed ``--dim``, an unknown
    ``--mode``, a budget that is not a positive finite number)."""


class OutputError(PerfSeerError, OSError):
    """An output file cannot be written where it was asked: a folder's name,
    a folder that does not exist, or one the user may not write in (also an
    ``OSError``, as the failed write it stands for)."""


class ModelLoadError(PerfSeerError):
    """The model file is missing, is not ONNX, or is truncated/corrupt."""


class ShapeError(PerfSeerError):
    """A dimension could not be resolved (dynamic dim with no value given)."""


class DeviceError(PerfSeerError):
    """An unknown device, provider or predictor was asked for."""


class MetricError(PerfSeerError):
    """A metric the chosen predictor does not provide was asked for."""


class ProfileError(PerfSeerError):
    """Profiling could not run at all (as opposed to a recorded failed run)."""


class GraphError(PerfSeerError):
    """The model parses but its content cannot be costed: an unknown or
    unsupported data type, a name that is not UTF-8, an attribute out of
    range, a tensor too large to be real, or features that would not be
    finite and non-negative."""

    #: True when extraction failed on an unexpected internal error (a bug to
    #: report; the fuzzer counts these apart from the expected refusals).
    internal: bool = False


class LimitError(PerfSeerError):
    """Extraction hit its node cap or time limit (never a hang)."""


class DomainError(PerfSeerError):
    """The model lies far outside what the device's predictor was trained on
    (:mod:`perfseer_rt.predict.domain`), or the predictor gave a number that
    is not finite and positive. ``index``: the graph's position in the call."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index
