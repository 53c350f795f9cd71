"""``perfseer_rt.predict``: ONNX models in, predicted metrics with units out.

Every device is called the same way: its registry entry and the model asked
for pick one implementation of the predictor interface
(:mod:`perfseer_rt.predict.interface`, :mod:`perfseer_rt.predict.implementations`),
which gets the models and one :class:`~perfseer_rt.predict.interface.Request`.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Sequence

from perfseer_rt.predict import train_mode
from perfseer_rt.predict.implementations import implementation
from perfseer_rt.predict.interface import Request


def predict(models: str | os.PathLike[str] | bytes | Iterable[Any], batch: int | None = None,
            device: str | None = None, metrics: Sequence[str] | None = None,
            input_shapes: dict[str, tuple[int, ...]] | None = None,
            model: str | None = None, precision: str | None = None,
            dims: dict[str, int] | None = None, mode: str = "inference",
            optimizer: str | None = None, layout: str | None = None,
            power_limit_w: float | None = None, mig_profile: str | None = None,
            extrapolate: bool = False, attention: str | None = None) -> list[dict[str, Any]]:
    """Predict the metrics of one or many ONNX models on ``device``.

    Args:
        models: a path, bytes, ModelProto or PerfGraph, or a list of them.
        batch: batch size (resolves a dynamic first dim; default 1).
        device: a device name (``perfseer-rt devices``); default: the first
            of ``registry.DEFAULT_DEVICES`` that ships.
        metrics: subset of the device's metrics (default: all); one name
            alone may be given as a string.
        input_shapes: explicit input shapes, as for :func:`perfseer_rt.extract`.
        model: which of the device's predictors (``perfseer-rt devices``);
            default: the manifest's default for ``mode`` (GPU devices: the
            model with the lower held-out error in that mode).
        precision: GPU devices: ``fp32`` (PyTorch's defaults), ``tf32``,
            ``fp32-strict``, ``amp-fp16``, ``amp-bf16``, ``fp16``, ``bf16``
            (:mod:`perfseer_rt.gpu.precision`); CPU devices predict their
            measured precision (fp32) only.
        dims: symbolic input dims by name, as for :func:`perfseer_rt.extract`.
        mode: ``"inference"`` (default) or ``"train"``: one training step.
        optimizer: GPU training steps: ``sgd``, ``sgd-momentum``, ``adam``,
            ``adamw`` (default), ``adadelta``.
        layout: GPU devices: ``nchw`` (default) or ``nhwc`` (channels-last).
        attention: GPU devices: ``fused`` (default: the model calls PyTorch's
            scaled_dot_product_attention) or ``materialised`` (it computes the
            softmax of the scores itself; :data:`perfseer_rt.gpu.layouts.ATTENTION`).
        power_limit_w: GPU devices: a power cap in W (energy and a throttled
            latency when the cap binds).
        mig_profile: GPU devices with MIG: predict on this slice (e.g. ``1g.10gb``).
        extrapolate: predict a model far outside the predictor's domain
            anyway (:mod:`perfseer_rt.predict.domain`); its intervals then span how far outside it is.

    Returns:
        One dict per model: ``model``, ``device``, ``batch``, ``metrics``
        (name -> ``{"value", "unit", ...}``), ``mig`` and ``warnings``.

    Raises:
        DeviceError: unknown device or mode, or no training-step predictor for
            ``mode="train"``. MetricError: a metric the device lacks. DomainError: a
            model far outside the predictor's domain (without ``extrapolate``),
            or a prediction that is not a finite positive number.
        ModelLoadError / ShapeError: as :func:`extract`. PerfSeerError: a
            value outside its allowed set (precision, optimizer, layout...).
    """
    if isinstance(models, (str, os.PathLike, bytes)) or not isinstance(models, Iterable):
        models = [models]
    if isinstance(metrics, str):  # one metric's name, not its letters
        metrics = [metrics]
    request = Request(batch=batch, metrics=metrics, input_shapes=input_shapes, dims=dims, model=model,
                      precision=precision, mode=mode, optimizer=optimizer, layout=layout,
                      attention=attention, power_limit_w=power_limit_w, mig_profile=mig_profile,
                      extrapolate=extrapolate)
    pred = train_mode.predictor_for(device, mode)
    return implementation(pred, model, mode).predict(list(models), request)
