"""Which implementation of the predictor interface serves a device entry
(:mod:`perfseer_rt.predict.interface`): importing an implementation's module
registers it. The CPU one (``seernet``) is imported with this module; the GPU
one (:mod:`perfseer_rt.gpu.predictor`, with its kernel, memory and timeline
models) only when a GPU entry is served, so a CPU prediction's start does not
pay for it.
"""

from __future__ import annotations

from typing import Any

from perfseer_rt.errors import DeviceError
from perfseer_rt.predict import seernet_impl as _seernet  # noqa: F401  (registers kind "seernet")
from perfseer_rt.predict.interface import IMPLEMENTATIONS, DevicePredictor

#: Every kind of entry this perfseer-rt serves.
KINDS = ("gpu", "seernet")


def _register(kind: str) -> None:
    """Import the module that registers the implementations of ``kind``."""
    if kind == "gpu":
        # lazy: the GPU predictor's modules take ~0.1 s to import; CPU predictions never use them
        from perfseer_rt.gpu import predictor as _gpu  # noqa: F401  (registers kind "gpu")


def implementation(pred: Any, model: str | None = None, mode: str = "inference") -> DevicePredictor:
    """The implementation serving the registry entry ``pred`` with its model
    ``model`` (default: the entry's default model for ``mode``).

    Raises:
        DeviceError: an entry of a kind this perfseer-rt does not serve, or
            a model the entry does not have (the message lists them).
    """
    name = model or pred.default_model_for(mode)
    _register(pred.kind)
    factory = IMPLEMENTATIONS.get((pred.kind, name)) or IMPLEMENTATIONS.get((pred.kind, None))
    if factory is None:
        if pred.kind in KINDS:
            raise DeviceError(f"device {pred.device!r} has no model {name!r}; it has "
                              f"{', '.join(pred.model_names)}")
        raise DeviceError(f"device {pred.device!r} is of kind {pred.kind!r}, which this perfseer-rt "
                          f"does not serve (it serves {', '.join(KINDS)})")
    return factory(pred)
