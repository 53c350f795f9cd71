"""The learned CPU predictors (SeerNet, kind ``seernet``) behind the one
predictor interface (:mod:`perfseer_rt.predict.interface`): the PerfGraphs of
many models go through the exported ONNX predictor together
(:func:`perfseer_rt.predict.seernet_run.run_with_gaps`), with intervals, the
predictor's domain warnings, memory parts and MIG advice.
"""

from __future__ import annotations

import os
from typing import Any

from perfseer_rt.errors import MetricError, PerfSeerError
from perfseer_rt.graph import PerfGraph, extract
from perfseer_rt.predict import domain, explain, local_cpu, mig, train_mode, uncertainty
from perfseer_rt.predict.interface import Request, register
from perfseer_rt.predict.registry import Predictor
from perfseer_rt.predict.seernet_run import (
    _add_intervals,
    _wanted,
    corrected_by,
    external_weights_mb,
    memory_parts,
    out_of_distribution,
    reported,
    run_with_gaps,
)

#: What only GPU devices take.
GPU_ONLY = ("optimizer", "layout", "attention", "power_limit_w", "mig_profile")


@register("seernet")
class SeernetPredictor:
    """A seernet device entry (shipped or calibrated), inference or training step."""

    def __init__(self, pred: Predictor) -> None:
        self.pred = pred

    def metric_names(self, mode: str) -> list[str]:
        return list(self.pred.metrics)

    def predict(self, models: list[Any], request: Request) -> list[dict[str, Any]]:
        pred, model, metrics = self.pred, request.model, request.metrics
        batch, input_shapes, dims, precision = request.batch, request.input_shapes, request.dims, request.precision
        for name in GPU_ONLY:
            if getattr(request, name) is not None:
                raise PerfSeerError(f"{name} applies to GPU devices only; {pred.device!r} is a CPU predictor")
        if precision not in (None, "fp32"):
            raise MetricError(f"--precision {precision!r} applies to GPU devices only; "
                              f"{pred.device!r} predicts its measured precision")
        pred.model_file(model)  # an unknown model fails before any extraction
        wanted = _wanted(pred, metrics)
        graphs = [m if isinstance(m, PerfGraph) else extract(m, batch=batch, input_shapes=input_shapes,
                                                             dims=dims)
                  for m in models]
        if not graphs:
            return []
        # domain hook (perfseer_rt.predict.domain): refuse far graphs, finite positive numbers only
        names = [os.fspath(m) if isinstance(m, (str, os.PathLike)) else f"model {i + 1}"
                 for i, m in enumerate(models)]
        far = domain.screen(domain.of_predictor(pred.manifest, pred.folder), graphs, names, pred.device,
                            request.extrapolate)
        raw, raw_gap = run_with_gaps(pred, graphs, model)
        values = reported(pred, raw, external_weights_mb(graphs), graphs)
        domain.check_values(values, pred.outputs, names)
        gaps = None if raw_gap is None else uncertainty.phase_gaps(raw_gap, values, pred.outputs, pred.memory)
        cpu_warning = local_cpu.mismatch_warning(pred.device, pred.manifest)
        mem_metric = next((m for m in pred.metrics if m.startswith("peak_mem")), None)
        unc = pred.uncertainty
        distance = uncertainty.scores(unc, pred.folder, graphs) if unc is not None else None
        fixes = corrected_by(pred)
        results: list[dict[str, Any]] = []
        for i, (source, graph, row) in enumerate(zip(models, graphs, values)):
            out = dict(zip(pred.outputs, (float(v) for v in row)))
            metric_out: dict[str, dict[str, Any]] = {m: {"value": out[m], "unit": pred.unit(m)} for m in wanted}
            result: dict[str, Any] = {
                "model": os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<in-memory>",
                "device": pred.device,
                "batch": int(graph.globals["batch_size"]),
                "metrics": metric_out,
                "mig": None,
                "warnings": out_of_distribution(pred, graph) + ([cpu_warning] if cpu_warning else []),
            }
            if unc is not None and distance is not None:
                _add_intervals(result, unc, float(distance[i]),
                               None if gaps is None else dict(zip(pred.outputs, (float(v) for v in gaps[i]))),
                               calibrated=(model or pred.default_model) == pred.default_model,
                               corrections=fixes)
            outside = far[i]
            if outside is not None:
                domain.mark_extrapolated(result, outside[0], outside[1])
            if pred.memory is not None and pred.memory.peak in wanted:
                metric_out[pred.memory.peak]["parts"] = memory_parts(pred.memory, graph, out,
                                                                      pred.run_memory is not None)
            if pred.mig_gpu and mem_metric:
                mape = pred.test_accuracy(mem_metric, model).get("mape")
                result["mig"] = mig.suggest(pred.mig_gpu, out[mem_metric], mig.margin_for(mape))
            results.append(explain.annotate(train_mode.annotate(result, pred, model), pred, model))
        return results
