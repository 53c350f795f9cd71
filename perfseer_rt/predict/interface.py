"""One interface for every device's predictor.

A device entry (:class:`perfseer_rt.predict.registry.Predictor`: its
manifest and folder) is served by one implementation of
:class:`DevicePredictor`, chosen by the entry's kind and model in
:data:`IMPLEMENTATIONS` (:func:`perfseer_rt.predict.implementations.implementation`)
— the registry, not the caller, knows which: the API
(:func:`perfseer_rt.predict`), the CLI and the service call every device the
same way, with one :class:`Request`.

Implementations:

* ``seernet``: the learned CPU predictors (:mod:`perfseer_rt.predict.seernet_impl`);
* ``gpu``, model ``prior``: a GPU from its spec sheet, priced by the kernel
  prior (:class:`perfseer_rt.gpu.predictor.PriorGpuPredictor`);
* ``gpu``, model ``learned`` (the default in each mode where its held-out
  error is the lower, see ``default_model_by_mode``): the same kernels priced by their
  roofline with the learned whole-model layer
  (:class:`perfseer_rt.gpu.predictor.LearnedGpuPredictor`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

#: ``mode`` values.
MODES = ("inference", "train")


@dataclass(frozen=True)
class Request:
    """What is asked of a device, besides the models.

    ``batch``, ``input_shapes`` and ``dims`` resolve the graph (as
    :func:`perfseer_rt.extract`); ``metrics`` a subset (default all);
    ``model`` one of the entry's predictors; ``precision``, ``layout``,
    ``attention``, ``optimizer`` and ``power_limit_w`` (W) apply to GPU devices;
    ``mig_profile`` takes a MIG slice of a MIG-capable GPU as the device;
    ``extrapolate`` predicts a model far outside the predictor's domain
    anyway (:mod:`perfseer_rt.predict.domain`), with an interval as wide as
    it is far.
    """

    batch: int | None = None
    metrics: Sequence[str] | None = None
    input_shapes: dict[str, tuple[int, ...]] | None = None
    dims: dict[str, int] | None = None
    model: str | None = None
    precision: str | None = None
    mode: str = "inference"
    optimizer: str | None = None
    layout: str | None = None
    attention: str | None = None
    power_limit_w: float | None = None
    mig_profile: str | None = None
    extrapolate: bool = False


class DevicePredictor(Protocol):
    """What every implementation answers."""

    def predict(self, models: list[Any], request: Request) -> list[dict[str, Any]]:
        """One result dict per model (``model``, ``device``, ``batch``,
        ``mode``, ``metrics``, ``mig``, ``warnings``, ...)."""
        ...

    def metric_names(self, mode: str) -> list[str]:
        """The metrics a prediction in ``mode`` answers."""
        ...


Factory = Callable[[Any], DevicePredictor]
#: (kind, model) -> the factory of its implementation, given the registry's
#: Predictor; model None: every model of the kind (the implementation picks
#: the entry's ONNX file by name itself).
IMPLEMENTATIONS: dict[tuple[str, str | None], Factory] = {}


def register(kind: str, model: str | None = None) -> Callable[[Factory], Factory]:
    """Class decorator: the implementation of device entries of ``kind``
    (and of its model ``model`` only, where given)."""
    def wrap(factory: Factory) -> Factory:
        IMPLEMENTATIONS[(kind, model)] = factory
        return factory
    return wrap
