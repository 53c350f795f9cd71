"""The typed, strict manifest of a ``gpu-prior`` device entry
(``exported_models/<gpu>/manifest.json``, written by
``training/gpuprior/devices.py``).

Read like the seernet manifests (:mod:`perfseer_rt.predict.manifest`, same
parser): a missing or unknown field is a :class:`ManifestError` naming it
(``spec.Num_Sm``), never a default; fields that may be empty are written as
``null``. The layout is ``perfseer-rt-predictor/1`` with kind ``gpu-prior``.
Units: ``kernel_launch_ms`` ms per kernel; ``memory_overhead`` MiB; the spec
sheet's units are those of :class:`perfseer_rt.gpu.specs.GpuSpec` (GB, GB/s,
MHz, GFLOP/s, MB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from perfseer_rt.gpu.calibrate import Correction
from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.predict.manifest import Device, ManifestError, Metric, parse_section

FORMAT = "perfseer-rt-predictor/1"
KIND = "gpu-prior"


@dataclass(frozen=True)
class SpecSheet:
    """A NeuSight-style device config, its field names as NeuSight spells them."""

    Device: str
    Dev_Mem: float       #: GB
    Mem_Bw: float        #: GB/s
    Num_Sm: int
    Core_Per_SM: int
    Freq: float          #: MHz
    SingleFLOPs: float   #: fp32 peak, GFLOP/s
    L2Cache: float       #: MB
    TC16_FLOPs: Union[float, None]  #: dense fp16/bf16 tensor-core peak, GFLOP/s; null: none known


@dataclass(frozen=True)
class PriorModel:
    name: str
    file: str


@dataclass(frozen=True)
class MemoryOverhead:
    """MiB added to every prediction's peak memory."""

    cuda_context_mib: float
    cublas_workspace_mib: float


@dataclass(frozen=True)
class LeaveOneGpuOut:
    """Per-operator MAPE (%) of the prior with this GPU held out of its fit."""

    mape: float
    per_operator: dict[str, float]
    meaning: str


@dataclass(frozen=True)
class WholeModelCheck:
    """The entry's whole-model latency against labels measured by others
    (``accuracy.whole_model``; ``reports/gpu-prior/neusight_e2e.md``):
    ``mape`` and ``median_error`` in %, over ``labels`` models."""

    labels: int
    mape: float
    median_error: float
    source: str
    meaning: str


@dataclass(frozen=True)
class GpuTrainingData:
    configurations: int  #: kernel rows the prior was fitted on


@dataclass(frozen=True)
class GpuPriorManifest:
    format: str
    kind: str
    version: str
    device: Device
    feature_version: str
    provenance: str
    spec: SpecSheet
    spec_source: str
    has_kernel_rows: bool
    prior: str                     #: folder of the shared prior, relative to the entry
    metrics: tuple[Metric, ...]
    models: tuple[PriorModel, ...]
    default_model: str
    mig_gpu: Union[str, None]
    kernel_launch_ms: float
    memory_overhead: MemoryOverhead
    assumptions: tuple[str, ...]
    accuracy: dict[str, Union[LeaveOneGpuOut, WholeModelCheck]]
    calibration: Union[Correction, None]
    calibration_source: Union[str, None]
    training_data: GpuTrainingData

    @property
    def gpu_spec(self) -> GpuSpec:
        return GpuSpec.from_config(spec_config(self.spec))


def spec_config(sheet: SpecSheet) -> dict[str, Any]:
    """The spec sheet as the dict :meth:`GpuSpec.from_config` reads."""
    return {k: getattr(sheet, k) for k in SpecSheet.__dataclass_fields__}


def parse_gpu_prior(doc: Any) -> GpuPriorManifest:
    """A :class:`GpuPriorManifest` from its JSON document, strictly.

    Raises:
        ManifestError: another format or kind, a missing or unknown field
            (named), a value of the wrong type, a default model not listed.
    """
    m = parse_section(GpuPriorManifest, doc)
    if m.kind != KIND or m.format != FORMAT:
        raise ManifestError(f"manifest format {m.format!r} kind {m.kind!r}: a gpu-prior entry "
                            f"is {FORMAT!r} kind {KIND!r}")
    names = [e.name for e in m.models]
    if m.default_model not in names:
        raise ManifestError(f"manifest field default_model: {m.default_model!r} is not one of "
                            f"the models {names}")
    return m
