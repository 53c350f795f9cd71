"""Predicting metrics with the shipped (exported ONNX) SeerNet predictors."""

from perfseer_rt.predict.api import predict
from perfseer_rt.predict.registry import get_predictor, predictors

__all__ = ["get_predictor", "predict", "predictors"]
