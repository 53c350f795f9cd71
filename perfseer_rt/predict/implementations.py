"""Which implementation of the predictor interface serves a device entry
(:mod:`perfseer_rt.predict.interface`): importing the implementations
registers them.
"""

from __future__ import annotations

from typing import Any

from perfseer_rt.errors import DeviceError
from perfseer_rt.gpu import predictor as _gpu  # noqa: F401  (registers kind "gpu")
from perfseer_rt.predict import seernet_impl as _seernet  # noqa: F401  (registers kind "seernet")
from perfseer_rt.predict.interface import IMPLEMENTATIONS, DevicePredictor


def implementation(pred: Any, model: str | None = None) -> DevicePredictor:
    """The implementation serving the registry entry ``pred`` with its model
    ``model`` (default: the entry's default model).

    Raises:
        DeviceError: an entry of a kind this perfseer-rt does not serve, or
            a model the entry does not have (the message lists them).
    """
    name = model or pred.default_model
    factory = IMPLEMENTATIONS.get((pred.kind, name)) or IMPLEMENTATIONS.get((pred.kind, None))
    if factory is None:
        kinds = sorted({k for k, _ in IMPLEMENTATIONS})
        if pred.kind in kinds:
            raise DeviceError(f"device {pred.device!r} has no model {name!r}; it has "
                              f"{', '.join(pred.model_names)}")
        raise DeviceError(f"device {pred.device!r} is of kind {pred.kind!r}, which this perfseer-rt "
                          f"does not serve (it serves {', '.join(kinds)})")
    return factory(pred)
