"""``predict --mode train`` on a ``gpu-prior`` device: one training step
priced kernel by kernel (:mod:`perfseer_rt.gpu.train_step` states the rules).

Metrics: ``step_ms`` (parts: forward, loss, backward, optimizer, ms) and
``peak_mem_mb`` (parts: weights, gradients, optimizer state, activations kept
for backward, the largest activation's gradient, workspace, CUDA context,
MiB), so a scheduler sees why a job would not fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from perfseer_rt.errors import MetricError
from perfseer_rt.gpu import memory, mig_advice, train_step
from perfseer_rt.gpu.kernels import map_graph
from perfseer_rt.gpu.predict import FP32_NOTE, TC_ASSUMPTION, device_for, element_scale, header, model_proto
from perfseer_rt.graph import PerfGraph, extract
from perfseer_rt.graph.extract import general_warnings
from perfseer_rt.predict.mig import margin_for
from perfseer_rt.predict.registry import Predictor

#: What a training-step prediction of a gpu-prior device reports.
TRAIN_METRICS = ("step_ms", "peak_mem_mb")


def predict_gpu_train(pred: Predictor, models: list[Any], batch: int | None = None,
                      metrics: Sequence[str] | None = None,
                      input_shapes: dict[str, tuple[int, ...]] | None = None,
                      precision: str | None = None, dims: dict[str, int] | None = None
                      ) -> list[dict[str, Any]]:
    """Training-step predictions on a ``gpu-prior`` entry; arguments as
    :func:`perfseer_rt.predict.api.predict`.

    Raises:
        MetricError: a metric other than ``step_ms`` / ``peak_mem_mb``.
        PerfSeerError: as :func:`perfseer_rt.gpu.predict.predict_gpu`.
    """
    wanted = list(metrics) if metrics else list(TRAIN_METRICS)
    missing = [m for m in wanted if m not in TRAIN_METRICS]
    if missing:
        raise MetricError(f"device {pred.device!r} does not predict {', '.join(missing)} in --mode "
                          f"train; it predicts {', '.join(TRAIN_METRICS)}")
    precision = precision or "fp32"
    dev, tc = device_for(pred, precision)
    overhead = pred.manifest["memory_overhead"]
    checked = pred.manifest.get("accuracy", {}).get("whole_model_train")
    results = []
    for source in models:
        graph = source if isinstance(source, PerfGraph) else extract(
            source, batch=batch, input_shapes=input_shapes, dims=dims)
        _, scale = element_scale(graph, tc)
        weights, exact = memory.weight_bytes(model_proto(source), graph)
        params = float(graph.globals["params_total"])  # distinct weights' elements
        fwd = map_graph(graph, itemsize_scale=scale)
        phases = {"forward": fwd, "loss": train_step.loss(graph, 4.0 * scale),
                  "backward": train_step.backward(fwd, 4.0 * scale),
                  "optimizer": train_step.optimizer(weights, params)}

        def step_ms(spec: Any, phases: dict[str, Any] = phases) -> tuple[float, dict[str, float]]:
            """The step's ms (with the entry's calibration) and the prior's ms per phase."""
            by_phase = {k: dev.latency_ms(kern, spec, tc, corrected=False) for k, kern in phases.items()}
            parts = {k: ms for k, (ms, _) in by_phase.items()}
            by_family: dict[str, float] = {}
            launches: dict[str, float] = {}
            for phase, (_, fams) in by_phase.items():
                for fam, ms in fams.items():
                    by_family[fam] = by_family.get(fam, 0.0) + ms
                for fam, ms in dev.launches_ms(phases[phase]).items():
                    launches[fam] = launches.get(fam, 0.0) + ms
            total = dev.correction.total(by_family, launches) if dev.correction else sum(parts.values())
            return total, parts

        total, parts = step_ms(dev.spec)
        saved, largest = train_step.saved_activation_bytes(fwd, graph, 4.0 * scale)
        mem_parts = train_step.memory_parts(weights, params, saved, largest,
                                            memory.workspace_bytes(graph, overhead["cublas_workspace_mib"]),
                                            float(overhead["cuda_context_mib"]))
        mem = round(sum(mem_parts.values()), 2)
        warnings = [TC_ASSUMPTION if tc else FP32_NOTE] + fwd.notes + general_warnings(graph.warnings)
        if not exact:
            warnings.append("weights from the PerfGraph: a shared initializer counts once per use")
        metric_values = {
            "step_ms": {"value": round(total, 4), "unit": "ms", "interval": None, "coverage": None,
                        "meaning": train_step.STEP_MEANING + f"; optimizer {train_step.OPTIMIZER}"
                        + ("; whole-model check of forward + backward: MAPE {mape:.1f} % (median "
                           "{median_error:+.1f} %) on {labels} training runs measured by others "
                           "({source})".format(**checked) if checked else
                           "; no training runs of this GPU check it")
                        + ("; the parts are the prior's, the value is scaled by the entry's calibration "
                           f"({dev.calibration_source})" if dev.correction else ""),
                        "parts": {k: round(v, 4) for k, v in parts.items()},
                        "launch_overhead_ms": {k: round(sum(dev.launches_ms(kern).values()), 4)
                                               for k, kern in phases.items()}},
            "peak_mem_mb": {"value": mem, "unit": "MiB", "interval": None, "coverage": None,
                            "meaning": train_step.MEM_MEANING, "parts": mem_parts}}
        result = {**header(pred, source, graph, "train", precision,
                           f"{dev.spec.name}: spec sheet + NeuSight kernel prior, training step "
                           "from forward kernels" + (", calibrated" if dev.correction else "")),
                  "metrics": {m: metric_values[m] for m in wanted}, "mig": None, "warnings": warnings}
        if pred.manifest.get("mig_gpu"):
            result["mig"] = mig_advice.advise(pred.manifest["mig_gpu"], dev.spec, mem, margin_for(None),
                                              lambda s: step_ms(s)[0])  # noqa: B023 (advise calls it before the loop moves on)
        results.append(result)
    return results
