"""The service's JSON schema: the prediction result contract of
:func:`perfseer_rt.predict.predict` (the same as ``perfseer-rt predict
--json``), as pydantic models for the OpenAPI page. Keys beyond these pass
through (``extra="allow"``): newer results may carry more."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Metric(_Open):
    value: float = Field(description="the prediction, in `unit`")
    unit: str = Field(description="ms, MiB (2**20 bytes), percent, mJ ...")
    interval: Optional[list[float]] = Field(None, description="[lo, hi] prediction interval")
    coverage: Optional[float] = Field(None, description="the interval's nominal coverage, 0..1")
    meaning: Optional[str] = Field(None, description="what is measured, over which baseline")


class Predictor(_Open):
    device: str
    kind: Optional[str] = None
    model: Optional[str] = None
    version: Optional[str] = None
    provenance: Optional[str] = None
    description: Optional[str] = Field(None, description="runtime, threads, precision, hardware")


class Result(_Open):
    model: str
    device: str
    batch: int
    mode: Optional[str] = "inference"
    predictor: Optional[Predictor] = None
    metrics: dict[str, Metric]
    mig: Optional[dict[str, Any]] = None
    warnings: list[str] = []


class Check(_Open):
    metric: str
    unit: Optional[str] = None
    limit: float
    value: float
    judged: float = Field(description="the value judged: the interval's upper end, else value")
    judged_by: Optional[str] = Field(
        default=None, description='which bound was judged: "interval_upper" or "value" '
                                  "(no interval)")
    interval: Optional[list[float]] = None
    ok: bool


class CheckVerdict(_Open):
    ok: bool
    checks: list[Check]
    prediction: Result


class DeviceRow(_Open):
    device: str
    description: Optional[str] = None
    models: list[str]
    default_model: Optional[str] = None
    default_model_by_mode: dict[str, str] = Field(
        default_factory=dict, description="the default model per mode where it differs by mode "
        "(GPU entries: the lower held-out error in that mode)")


class ErrorBody(BaseModel):
    error: str = Field(description="one line, the same as the CLI's")
    type: str = Field(description="the error's class, e.g. ModelLoadError")


class LayerOutput(_Open):
    tensor: str
    shape: list[int]


class Layer(_Open):
    index: int
    name: str
    op: str
    flops: float
    mac_bytes: float = Field(description="bytes moved: inputs + weights + outputs")
    weight_bytes: float
    params: float
    ai_flop_per_byte: float = Field(description="arithmetic intensity, FLOP per byte moved")
    flops_share: float = Field(description="share of the model's FLOPs, 0..1")
    out_elems: float
    outputs: list[LayerOutput] = Field(description="the tensors it sends to other layers")


class LayerTable(_Open):
    model: str
    input_shapes: dict[str, list[int]]
    batch: int
    totals: dict[str, float] = Field(description="nodes, edges, flops, mac_bytes, params, "
                                     "weight_bytes, ai_flop_per_byte")
    ops: dict[str, int]
    layers: list[Layer]
    unknown_ops: list[str] = []
    warnings: list[str] = []
    feature_version: str
