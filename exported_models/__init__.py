"""Shipped predictors, one folder per device (see perfseer_rt.predict.registry)."""
