"""Predicting metrics with the shipped (exported ONNX) SeerNet predictors."""

from perfseer_rt.predict.api import predict
from perfseer_rt.predict.budget import check, fit
from perfseer_rt.predict.registry import get_predictor, predictors

__all__ = ["check", "fit", "get_predictor", "predict", "predictors"]
