"""GPU devices behind the one predictor interface (:mod:`perfseer_rt.predict.interface`):
a GPU from its spec sheet (:mod:`perfseer_rt.gpu.entries`), the step as
PyTorch eager runs it (:mod:`perfseer_rt.gpu.step`), each kernel priced by

* :class:`LearnedGpuPredictor` (model ``learned``, the default in each mode
  where its held-out error is the lower): its
  roofline on the spec sheet corrected by the learned whole-model layer
  (:mod:`perfseer_rt.gpu.learned`), trained on whole-model latencies
  measured by others;
* :class:`PriorGpuPredictor` (model ``prior``): the NeuSight kernel prior
  (:mod:`perfseer_rt.gpu.prior`), fitted on fp32 single operators;
* :class:`BlendGpuPredictor` (model ``blend``): the geometric mean of the
  two (their errors on training steps run in opposite directions).

All answer the same metrics: latency (inference) or step time (training),
peak memory in parts, SM utilization, energy and average power
(:mod:`perfseer_rt.gpu.resources`), per MIG slice too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from perfseer_rt.errors import DeviceError, MetricError, PerfSeerError
from perfseer_rt.gpu import backward as B
from perfseer_rt.gpu import learned as L
from perfseer_rt.gpu import mig_advice, power, pricing, resources, step, timeline
from perfseer_rt.gpu.kernel_table import KernelTable
from perfseer_rt.gpu.layouts import ATTENTION, LAYOUTS
from perfseer_rt.gpu.precision import Precision, get_precision
from perfseer_rt.gpu.prior import PROVENANCE, load_prior
from perfseer_rt.gpu.spec_sheet import SpecSheet
from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.graph import PerfGraph, extract
from perfseer_rt.graph.extract import general_warnings
from perfseer_rt.predict.interface import Request, register
from perfseer_rt.predict.mig import find_profile, margin_for, mem_fraction, usable_mib
from perfseer_rt.predict.registry import Predictor

#: Prior's launch cost per kernel launch (ms): the GPU-side floor of a kernel.
PRIOR_LAUNCH_MS = 0.003
#: The blend's weight on the prior: ``ms = learned ** (1 - w) * prior ** w``,
#: for the step and for each kernel and host part (equal weights, fixed
#: before any comparison; the held-out report prices it the same way).
BLEND_PRIOR_WEIGHT = 0.5


@dataclass
class Step:
    """One model's step on one spec: its kernels, their ms and the total."""

    table: KernelTable
    kernel_ms: np.ndarray
    host_ms: np.ndarray
    total_ms: float


def energy_mj(block: dict[str, Any]) -> dict[str, Any]:
    """The ``energy_j`` block of :mod:`perfseer_rt.gpu.power` in mJ: the
    unit and key ``perfseer-rt profile`` reports (``energy_mj``), so a
    prediction and a measurement compare as they are."""
    out = {k: v for k, v in block.items() if k not in ("value", "value_mj", "unit", "parts")}
    return {"value": block["value_mj"], "unit": "mJ", **out,
            "parts_mj": {k: round(v * 1e3, 3) for k, v in block.get("parts", {}).items()}}


class GpuPredictor:
    """What both GPU implementations share; subclasses price kernels."""

    model_name = ""
    description = ""

    def __init__(self, pred: Predictor) -> None:
        self.pred = pred
        self.sheet = SpecSheet.from_dict(pred.manifest["spec_sheet"])
        self.spec = self.sheet.to_gpu_spec()

    # -- pricing (the implementations differ here only) ----------------
    def kernel_ms(self, table: KernelTable, spec: GpuSpec, layout: str, prec: Precision,
                  mode: str) -> np.ndarray:
        """ms of every kernel of ``table`` on ``spec`` in ``mode`` (inference | train)."""
        raise NotImplementedError

    def host_scale(self, mode: str) -> float:
        """Factor on the host dispatch time of a step in ``mode``."""
        return 1.0

    def accuracy(self) -> dict[str, Any] | None:
        """Held-out accuracy of this model (None: none recorded)."""
        return None

    def interval_log_q(self, mode: str) -> list[float] | None:
        """The 10th and 90th percentile of log(measured / predicted) of this
        model in ``mode`` with the GPU held out (None: none recorded)."""
        acc = self.accuracy() or {}
        by_mode = ((acc.get("by_mode") or {}).get(mode) or {}).get(self.model_name) or {}
        q = by_mode.get("log_q") or (acc.get("log_q") if self.model_name == "learned" else None)
        return list(q) if q else None

    # -- the interface ---------------------------------------------------
    def run(self, graph: PerfGraph, cfg: step.StepConfig, spec: GpuSpec,
            table: KernelTable | None = None) -> Step:
        table = table if table is not None else step.kernels(graph, cfg)
        kms = self.kernel_ms(table, spec, cfg.layout, cfg.precision, cfg.mode)
        host = step.host_ms(table, cfg.mode, self.host_scale(cfg.mode))
        return Step(table, kms, host, step.total_ms(float(kms.sum()), float(host.sum())))

    def config(self, request: Request) -> step.StepConfig:
        prec = get_precision(request.precision)
        if request.mode not in ("inference", "train"):
            raise DeviceError(f"mode {request.mode!r}: expected inference or train")
        layout = request.layout or "nchw"
        if layout not in LAYOUTS:
            raise PerfSeerError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
        opt = B.get_optimizer(request.optimizer) if request.mode == "train" else None
        if request.optimizer is not None and request.mode != "train":
            raise PerfSeerError("optimizer applies to --mode train only")
        attention = request.attention or ATTENTION[0]
        if attention not in ATTENTION:
            raise PerfSeerError(f"attention {attention!r}: expected one of {', '.join(ATTENTION)}")
        if prec.dtype == "bf16":
            self.spec.peak_gflops("bf16")  # refuses a GPU without bf16 tensor cores
        return step.StepConfig(prec, mode=request.mode, optimizer=opt, layout=layout,
                               sdpa=attention == "fused")

    def slice_spec(self, profile: str | None) -> GpuSpec:
        """The spec sheet the model runs on: the whole GPU, or MIG ``profile``'s slice."""
        if profile is None:
            return self.spec
        table = self.mig_table(profile)
        p = find_profile(table, profile)
        return mig_advice.slice_spec(table, self.spec, p.slices, p.memory_gb)

    def mig_table(self, profile: str) -> str:
        """The GPU's MIG table (its spec sheet's ``mig``).

        Raises:
            DeviceError: a GPU without MIG.
        """
        if self.sheet.mig is None:
            raise DeviceError(f"MIG profile {profile!r}: device {self.pred.device!r} "
                              f"({self.sheet.name}) has no MIG")
        return str(self.sheet.mig)

    def metric_names(self, mode: str) -> list[str]:
        return ["step_ms" if mode == "train" else "latency_ms", "peak_mem_mb", "sm_util_pct",
                "energy_mj", "power_w"]

    def predict(self, models: list[Any], request: Request) -> list[dict[str, Any]]:
        cfg = self.config(request)
        spec = self.slice_spec(request.mig_profile)
        names = self.metric_names(cfg.mode)
        time_metric = names[0]
        wanted = list(request.metrics) if request.metrics else names
        missing = [m for m in wanted if m not in names]
        if missing:
            raise MetricError(f"device {self.pred.device!r} does not predict {', '.join(missing)} in "
                              f"--mode {cfg.mode}; it predicts {', '.join(names)}")
        results = []
        for source in models:
            graph = source if isinstance(source, PerfGraph) else extract(
                source, batch=request.batch, input_shapes=request.input_shapes, dims=request.dims)
            results.append(self._one(source, graph, cfg, spec, request, wanted, time_metric))
        return results

    def _one(self, source: Any, graph: PerfGraph, cfg: step.StepConfig, spec: GpuSpec, request: Request,
             wanted: list[str], time_metric: str) -> dict[str, Any]:
        st = self.run(graph, cfg, spec)
        proto = resources.model_proto(source)
        if request.mig_profile is None:
            res = self._resources(graph, proto, st, cfg, self.spec, request.power_limit_w)
        else:
            p = find_profile(self.mig_table(request.mig_profile), request.mig_profile)
            res = self._resources(graph, proto, st, cfg, spec, request.power_limit_w,
                                  (usable_mib(p.memory_gb),
                                   mem_fraction(str(self.sheet.mig), p.memory_gb)))
        factor = float(res["throttle"]["latency_factor"])
        metrics = {time_metric: self._time_block(st, factor, cfg), "peak_mem_mb": res["peak_mem_mb"],
                   "sm_util_pct": res["sm_util_pct"], "energy_mj": energy_mj(res["energy_j"]),
                   "power_w": res["power_w"]}
        result: dict[str, Any] = {
            "model": os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<in-memory>",
            "device": self.pred.device + (f" [{request.mig_profile}]" if request.mig_profile else ""),
            "batch": int(graph.globals["batch_size"]), "mode": cfg.mode,
            "precision": cfg.precision.name, "layout": cfg.layout,
            "attention": "fused" if cfg.sdpa else "materialised",
            "optimizer": cfg.optimizer.name if cfg.optimizer else None,
            "predictor": self.info(),
            "metrics": {m: metrics[m] for m in wanted},
            "throttle": res["throttle"],
            "mig": None,
            "assumptions": self.assumptions(cfg) + [f"memory: {a}" for a in res["assumptions"]["memory"]]
            + [f"power: {a}" for a in res["assumptions"]["power"]],
            "warnings": st.table.notes + general_warnings(graph.warnings)
            + (["ops without a cost rule: " + ", ".join(sorted(set(graph.unknown_ops)))]
               if graph.unknown_ops else [])}
        if self.sheet.mig and request.mig_profile is None:
            result["mig"] = self._mig(graph, proto, cfg, st, res["peak_mem_mb"]["value"], request.power_limit_w)
        return result

    def _resources(self, graph: PerfGraph, proto: Any, st: Step, cfg: step.StepConfig, spec: GpuSpec,
                   power_limit_w: float | None, mig: tuple[float, float] | None = None) -> dict[str, Any]:
        """Memory, utilization, energy and power of step ``st`` run on
        ``spec`` (:func:`perfseer_rt.gpu.resources.resource_metrics`); ``mig``:
        (usable MiB, memory share) of the MIG slice ``spec`` is."""
        ps = resources.power_model(self.sheet, self.spec, cfg.precision)
        coeffs = power.default_coeffs(ps)
        if mig is not None:
            ps, coeffs = power.slice_power(ps, coeffs, spec.sms, mig[1])
        tl = timeline.from_step(st.table, st.kernel_ms, st.host_ms, st.total_ms)
        sheet = self.sheet if mig is None else replace(self.sheet, sms=spec.sms)  # a slice's context
        return resources.resource_metrics(
            graph, proto, tl, sheet, mode=cfg.mode, precision=cfg.precision.name,
            optimizer=cfg.optimizer.name if cfg.optimizer else None, power_limit_w=power_limit_w,
            capacity_mib=mig[0] if mig else None, power_spec=ps, power_coeffs=coeffs,
            fused_attention=cfg.sdpa)

    def _time_block(self, st: Step, factor: float, cfg: step.StepConfig) -> dict[str, Any]:
        by_class: dict[str, float] = {}
        by_phase: dict[str, float] = {}
        for c, p, ms in zip(st.table["cls"], st.table["phase"], st.kernel_ms):
            by_class[str(c)] = by_class.get(str(c), 0.0) + float(ms)
            by_phase[str(p)] = by_phase.get(str(p), 0.0) + float(ms)
        value = st.total_ms * factor
        acc = self.accuracy()
        log_q = self.interval_log_q(cfg.mode)
        block: dict[str, Any] = {
            "value": round(value, 4), "unit": "ms", "interval": None, "coverage": None,
            "meaning": ("one training step (forward, cross-entropy loss, backward, optimizer update)"
                        if cfg.mode == "train" else "one inference call (forward pass)")
            + " as PyTorch eager runs it on one stream after warm-up: the GPU's busy time "
            "(every kernel, priced by the " + self.description + ") and the host's dispatch time "
            f"combined as their smooth maximum (p = {step.SMOOTH_P:g})"
            + ("; slowed by the power limit (throttle)" if factor > 1.0 else ""),
            "gpu_busy_ms": round(float(st.kernel_ms.sum()), 4), "host_ms": round(float(st.host_ms.sum()), 4),
            "kernels": int(round(st.table.launches)),
            "parts": {k: round(v, 4) for k, v in sorted(by_class.items(), key=lambda kv: -kv[1])},
            "phases": {k: round(v, 4) for k, v in by_phase.items()}}
        if acc and log_q:
            lo, hi = log_q
            block["interval"] = [round(value * float(np.exp(lo)), 4), round(value * float(np.exp(hi)), 4)]
            block["coverage"] = acc.get("coverage")
        return block

    def _mig(self, graph: PerfGraph, proto: Any, cfg: step.StepConfig, st: Step, peak_mib: float,
             power_limit_w: float | None) -> dict[str, Any]:
        """Per MIG profile: usable memory, fit, latency, memory, utilization
        and energy on the slice (:func:`perfseer_rt.gpu.mig_advice.advise`)."""
        table = str(self.sheet.mig)
        steps: dict[int, Step] = {}

        def run_on(spec: GpuSpec) -> Step:
            if spec.sms not in steps:
                steps[spec.sms] = self.run(graph, cfg, spec, st.table)
            return steps[spec.sms]

        def latency_on(spec: GpuSpec) -> float:
            return run_on(spec).total_ms

        def extra_on(spec: GpuSpec, usable: float, mem_share: float) -> dict[str, Any]:
            m = self._resources(graph, proto, run_on(spec), cfg, spec, power_limit_w, (usable, mem_share))
            mem = m["peak_mem_mb"]
            return {"latency_ms": round(run_on(spec).total_ms * float(m["throttle"]["latency_factor"]), 4),
                    "peak_mem_mb": {"value": mem["value"], "unit": "MiB", "fits": mem["fits"],
                                    "views": {k: v["value"] for k, v in mem["views"].items()}},
                    "sm_util_pct": {k: m["sm_util_pct"][k]["value"] for k in ("nvml", "sm_active")},
                    "energy_mj": m["energy_j"]["value_mj"], "power_w": m["power_w"]["value"]}
        return mig_advice.advise(table, self.spec, peak_mib, margin_for(None), latency_on, extra_on)

    def info(self) -> dict[str, Any]:
        m = self.pred.manifest
        return {"device": self.pred.device, "kind": self.pred.kind, "model": self.model_name,
                "version": m.get("version", ""), "runtime": m.get("runtime"),
                "provenance": self.provenance(), "description": f"{self.sheet.name}: {self.description}",
                "spec_source": m.get("spec_source"), "accuracy": self.accuracy()}

    def provenance(self) -> str:
        return ""

    def assumptions(self, cfg: step.StepConfig) -> list[str]:
        return [f"precision {cfg.precision.name}: {cfg.precision.meaning}",
                "runtime PyTorch eager (>= 2.0): "
                + ("attention through scaled_dot_product_attention (one fused kernel)" if cfg.sdpa else
                   "attention materialised (scores written, softmax, then the second matmul: "
                   "--attention materialised)")
                + ", BatchNorm as its own kernel, cuDNN/cuBLAS kernels, one stream",
                "host dispatch time of a recent server CPU (a slower host makes small batches slower)"]


@register("gpu", "prior")
class PriorGpuPredictor(GpuPredictor):
    """Kernels priced by the NeuSight kernel prior (fp32 single operators,
    tensor-core kernels scaled to their peak under a stated assumption)."""

    model_name = "prior"
    description = "NeuSight kernel prior (single fp32 operators measured by others)"

    def kernel_ms(self, table: KernelTable, spec: GpuSpec, layout: str, prec: Precision,
                  mode: str) -> np.ndarray:
        prior = load_prior(str((self.pred.folder / "_gpu_prior").resolve()))
        return pricing.price(table, spec, prior, PRIOR_LAUNCH_MS)

    def accuracy(self) -> dict[str, Any] | None:
        """The record of the learned layer's report, which scores the prior
        too, per mode, on the same public whole-model labels (none of which
        the prior was fitted on); None where that layer is not installed."""
        try:
            layer = L.load_learned(str((self.pred.folder / "_gpu_learned").resolve()))
        except DeviceError:
            return None
        acc: dict[str, Any] | None = layer.doc.get("accuracy")
        return acc

    def provenance(self) -> str:
        return PROVENANCE

    def assumptions(self, cfg: step.StepConfig) -> list[str]:
        return super().assumptions(cfg) + [
            "tensor-core kernels reach the same fraction of their peak as fp32 kernels of the same "
            "shape reach of the fp32 peak (the prior's data are fp32 only)"]


@register("gpu", "learned")
class LearnedGpuPredictor(GpuPredictor):
    """Kernels priced by their roofline on the spec sheet times the learned
    layer's correction."""

    model_name = "learned"
    description = "roofline x learned whole-model layer (whole-model latencies measured by others)"

    def __init__(self, pred: Predictor) -> None:
        super().__init__(pred)
        self.layer = L.load_learned(str((pred.folder / "_gpu_learned").resolve()))

    def kernel_ms(self, table: KernelTable, spec: GpuSpec, layout: str, prec: Precision,
                  mode: str) -> np.ndarray:
        return self.layer.kernel_ms(table, spec, layout, prec.half, mode)

    def host_scale(self, mode: str) -> float:
        return self.layer.host_scale(mode)

    def accuracy(self) -> dict[str, Any] | None:
        acc: dict[str, Any] | None = self.layer.doc.get("accuracy")
        return acc

    def provenance(self) -> str:
        return str(self.layer.doc.get("provenance", ""))


def blend(a: np.ndarray, b: np.ndarray, w: float = BLEND_PRIOR_WEIGHT) -> np.ndarray:
    """``a ** (1 - w) * b ** w`` elementwise (ms; 0 where either is 0)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    out = np.zeros(np.broadcast(a, b).shape)
    ok = (a > 0) & (b > 0)
    out[ok] = np.exp((1.0 - w) * np.log(a[ok]) + w * np.log(b[ok]))
    return out


@register("gpu", "blend")
class BlendGpuPredictor(GpuPredictor):
    """The step, each kernel and each host part as the weighted geometric
    mean (:data:`BLEND_PRIOR_WEIGHT`) of the learned layer's and the kernel
    prior's."""

    model_name = "blend"
    description = ("geometric mean of the learned whole-model layer and the NeuSight kernel prior "
                   "(both from measurements by others)")

    def __init__(self, pred: Predictor) -> None:
        super().__init__(pred)
        self.learned = LearnedGpuPredictor(pred)
        self.prior = PriorGpuPredictor(pred)

    def run(self, graph: PerfGraph, cfg: step.StepConfig, spec: GpuSpec,
            table: KernelTable | None = None) -> Step:
        table = table if table is not None else step.kernels(graph, cfg)
        a, b = self.learned.run(graph, cfg, spec, table), self.prior.run(graph, cfg, spec, table)
        total = float(blend(np.array(a.total_ms), np.array(b.total_ms)))
        return Step(table, blend(a.kernel_ms, b.kernel_ms), blend(a.host_ms, b.host_ms), total)

    def accuracy(self) -> dict[str, Any] | None:
        return self.learned.accuracy()

    def provenance(self) -> str:
        return f"{self.learned.provenance()}; and {self.prior.provenance()}"

    def assumptions(self, cfg: step.StepConfig) -> list[str]:
        return self.prior.assumptions(cfg) + [
            f"the answer is learned^{1 - BLEND_PRIOR_WEIGHT:g} x prior^{BLEND_PRIOR_WEIGHT:g} "
            "(step, kernels and host parts alike)"]
