"""Budget questions an edge tool or a scheduler asks.

- :func:`check`: does this model meet a latency and/or memory budget on a
  device? (``perfseer-rt check``; exit 0 yes, 1 no, 2 bad input)
- :func:`fit`: the largest batch (or value of a named input dim) whose
  predicted memory, and latency when a limit is given, stays within budget
  (``perfseer-rt fit``).

A prediction is judged by the upper end of its interval when it has one
(``metrics[name]["interval"][1]``), else by its value: the safe side for a
budget. Limits are in the metrics' units: milliseconds and MiB.
"""

from __future__ import annotations

import math
import numbers
import os
from typing import Any

import onnx

from perfseer_rt.errors import MetricError, ModelLoadError, OptionError, PerfSeerError, ShapeError
from perfseer_rt.graph.extract import extract
from perfseer_rt.predict import registry
from perfseer_rt.predict.api import predict
from perfseer_rt.predict.implementations import implementation
from perfseer_rt.predict.mig import find_profile, usable_mib
from perfseer_rt.predict.train_mode import predictor_for

#: The largest value :func:`fit` tries (2**16).
FIT_MAX = 1 << 16


#: ``judged_by`` of a check: which bound of the prediction decided it.
BY_INTERVAL = "interval_upper"
BY_VALUE = "value"


def upper(metric: dict[str, Any]) -> float:
    """The value a budget is judged by: the interval's upper end, else the value."""
    iv = metric.get("interval")
    return float(iv[1]) if iv else float(metric["value"])


def judged_by(metric: dict[str, Any]) -> str:
    """Which bound :func:`upper` took: ``"interval_upper"`` or ``"value"``
    (the prediction has no interval)."""
    return BY_INTERVAL if metric.get("interval") else BY_VALUE


def _metrics(device: str | None, mode: str) -> tuple[list[str], str]:
    """(the metrics ``mode`` on ``device`` predicts, the one a latency budget
    reads: ``latency_ms`` for inference, ``step_ms`` for a training step)."""
    pred = predictor_for(device, mode)
    return implementation(pred, mode=mode).metric_names(mode), "step_ms" if mode == "train" else "latency_ms"


def _limits(max_latency_ms: float | None, max_memory_mb: float | None,
            pred_metrics: list[str], time_metric: str = "latency_ms") -> dict[str, float]:
    limits: dict[str, float] = {}
    for metric, limit, flag in ((time_metric, max_latency_ms, "--max-latency-ms"),
                                (_mem_metric(pred_metrics), max_memory_mb, "--max-memory-mb")):
        if limit is None:
            continue
        if isinstance(limit, bool) or not isinstance(limit, numbers.Real) or not 0 < limit < math.inf:
            raise OptionError(f"{flag} {limit!r}: expected a positive, finite number")
        if metric not in pred_metrics:
            raise MetricError(f"{flag}: this device's predictor does not predict "
                              f"{'memory' if metric != time_metric else 'latency'}; it "
                              f"predicts {', '.join(pred_metrics)}")
        limits[metric] = float(limit)
    if not limits:
        raise PerfSeerError("give at least one budget: --max-latency-ms and/or --max-memory-mb")
    return limits


def _mem_metric(metrics: list[str]) -> str:
    return next((m for m in metrics if m.startswith("peak_mem")), "peak_mem_mb")


def slice_memory(device: str | None, mig_profile: str | None, max_memory_mb: float | None) -> float | None:
    """The memory budget: ``max_memory_mb`` when given, else the usable MiB
    of the MIG slice ``mig_profile`` of ``device`` (None without either).

    Raises:
        DeviceError: a profile the device's MIG table does not have.
    """
    if max_memory_mb is not None or mig_profile is None:
        return max_memory_mb
    return usable_mib(find_profile(registry.get_predictor(device).mig_gpu, mig_profile).memory_gb)


def judge(result: dict[str, Any], limits: dict[str, float]) -> list[dict[str, Any]]:
    """One entry per limit: metric, limit, value, judged (upper) value,
    judged_by (which bound that is: ``"interval_upper"`` or ``"value"``), ok."""
    out = []
    for metric, limit in limits.items():
        m = result["metrics"][metric]
        out.append({"metric": metric, "unit": m.get("unit"), "limit": limit,
                    "value": m["value"], "judged": upper(m), "judged_by": judged_by(m),
                    "interval": m.get("interval"), "ok": upper(m) <= limit})
    return out


def check(model: Any, device: str | None = None, *, max_latency_ms: float | None = None,
          max_memory_mb: float | None = None, batch: int | None = None,
          input_shapes: dict[str, Any] | None = None, predictor_model: str | None = None,
          mode: str = "inference", dims: dict[str, int] | None = None,
          precision: str | None = None, optimizer: str | None = None, layout: str | None = None,
          power_limit_w: float | None = None, mig_profile: str | None = None,
          attention: str | None = None) -> dict[str, Any]:
    """Does ``model`` meet the budget on ``device``? ``mode="train"``: one
    training step (the latency budget then reads ``step_ms``). ``dims``,
    ``precision``, ``optimizer``, ``layout``, ``attention``, ``power_limit_w``: as for
    :func:`perfseer_rt.predict`. ``mig_profile``: the budget is that MIG
    slice of a GPU: predicted on the slice, and its usable memory is the
    memory budget unless ``max_memory_mb`` is given.

    Returns ``{"ok": bool, "checks": [...], "prediction": result}``; ``ok`` is
    True when every given limit holds for the upper end of the prediction's
    interval (its value when it has none).

    Raises:
        PerfSeerError: no limit given, a limit not positive, a metric the
        device does not predict, or any bad model / device as in ``predict``.
    """
    limits = _limits(max_latency_ms, slice_memory(device, mig_profile, max_memory_mb), *_metrics(device, mode))
    [result] = predict([model], batch=batch, device=device, input_shapes=input_shapes,
                       model=predictor_model, mode=mode, dims=dims, precision=precision, optimizer=optimizer,
                       layout=layout, attention=attention, power_limit_w=power_limit_w,
                       mig_profile=mig_profile)
    checks = judge(result, limits)
    return {"ok": all(c["ok"] for c in checks), "checks": checks, "prediction": result}


def dim_shapes(model: str | os.PathLike[str], dim: str, value: int, batch: int | None
               ) -> dict[str, tuple[int, ...]]:
    """Input shapes with every input dim named ``dim`` set to ``value``; a
    dynamic first dim of another name takes ``batch`` (default 1)."""
    try:
        proto = onnx.load(os.fspath(model), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - any parse failure is a bad model file
        raise ModelLoadError(f"cannot read {os.fspath(model)!r} as ONNX ({exc})") from None
    inits = {t.name for t in proto.graph.initializer}
    shapes, found = {}, False
    for inp in proto.graph.input:
        if inp.name in inits:
            continue
        dims = []
        for i, d in enumerate(inp.type.tensor_type.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(d.dim_value)
            elif d.dim_param == dim:
                dims.append(value)
                found = True
            elif i == 0:
                dims.append(batch or 1)
            else:
                raise ShapeError(f"input {inp.name!r} dim {i} ({d.dim_param or '?'!r}) is "
                                 f"dynamic and is not --dim {dim!r}")
        shapes[inp.name] = tuple(dims)
    if not found:
        names = sorted({d.dim_param for i in proto.graph.input
                        for d in i.type.tensor_type.shape.dim if d.dim_param})
        raise ShapeError(f"no input dim is named {dim!r}; the model's named dims: "
                         f"{', '.join(names) or 'none'}")
    return shapes


def fit(model: str | os.PathLike[str], device: str | None = None, *, max_memory_mb: float | None,
        max_latency_ms: float | None = None, dim: str | None = None,
        batch: int | None = None, predictor_model: str | None = None,
        max_value: int = FIT_MAX, mode: str = "inference", precision: str | None = None,
        optimizer: str | None = None, layout: str | None = None, power_limit_w: float | None = None,
        mig_profile: str | None = None, attention: str | None = None) -> dict[str, Any]:
    """The largest batch (or value of input dim ``dim``) within budget
    (``mode="train"``: of one training step, as :func:`check`).

    Tries 1, 2, 4, ... until a value breaks the budget (or ``max_value``), then
    bisects between the last that held and the first that broke; each value
    is extracted and predicted afresh. Assumes the predictions grow with the
    value (memory and latency do with batch and sequence length).

    Returns ``{"dim", "value" (None when even 1 breaks the budget),
    "prediction" (at value), "checks" (its verdict per limit, each with
    ``judged_by``: ``"interval_upper"`` when the prediction's interval
    decided, ``"value"`` when it has none), "next" (the prediction at
    value + 1 that broke it, None when value is max_value), "next_checks"
    (the same verdict for it), "tried": {value: ok}}``;
    on a GPU with MIG tables, ``prediction["mig"]`` names the smallest slice
    holding the answer's memory. GPU options and ``mig_profile`` as :func:`check`
    (``max_memory_mb`` may then be None: the slice's usable memory).
    """
    if isinstance(max_value, bool) or not isinstance(max_value, numbers.Integral) or max_value < 1:
        raise OptionError(f"max_value {max_value!r}: expected an integer of 1 or more")
    max_value = int(max_value)
    limits = _limits(max_latency_ms, slice_memory(device, mig_profile, max_memory_mb), *_metrics(device, mode))
    if dim is not None and not isinstance(model, (str, os.PathLike)):
        raise PerfSeerError("--dim needs a model file")
    tried: dict[int, tuple[bool, dict[str, Any]]] = {}

    def at(value: int) -> tuple[bool, dict[str, Any]]:
        if value not in tried:
            if dim is None:
                g = extract(model, batch=value)
            else:
                g = extract(model, input_shapes=dim_shapes(model, dim, value, batch))
            [r] = predict([g], device=device, model=predictor_model, mode=mode, precision=precision,
                          optimizer=optimizer, layout=layout, attention=attention,
                          power_limit_w=power_limit_w, mig_profile=mig_profile)
            r["model"] = os.fspath(model) if isinstance(model, (str, os.PathLike)) \
                else "<in-memory>"
            tried[value] = (all(c["ok"] for c in judge(r, limits)), r)
        return tried[value]

    good, bad = 0, None
    v = 1
    while v <= max_value:
        if at(v)[0]:
            good, v = v, v * 2
        else:
            bad = v
            break
    if bad is None and good < max_value:
        bad = None if at(max_value)[0] else max_value
        good = max_value if bad is None else good
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        if at(mid)[0]:
            good = mid
        else:
            bad = mid
    best = tried[good][1] if good else tried[1][1]
    return {"dim": dim or "batch", "value": good or None, "limits": limits,
            "prediction": best, "checks": judge(best, limits),
            "next": tried[bad][1] if bad is not None else None,
            "next_checks": judge(tried[bad][1], limits) if bad is not None else None,
            "tried": {k: ok for k, (ok, _) in sorted(tried.items())}}
