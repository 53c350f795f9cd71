"""The one contract between training and the runtime: the predictor manifest
and the predictor's inputs.

``exported_models/<device>/manifest.json`` is written by training
(``training/seernet/manifest.py``) and read here, strictly: a missing or
unknown field is a :class:`ManifestError` naming it (``models[1].sha256``),
never a default. Fields that may be empty are written explicitly as ``null``.

Layout (``schema_version`` 6; a version-5 document is read as version 6
with ``training_data.ops`` null, :func:`upgrade_v5`; a version-4 one also
with ``seernet.uncertainty.disagreement`` null and plain intervals,
:func:`upgrade_v4`; a version-3 one also with ``seernet.field_scale`` null,
:func:`upgrade_v3`; a version-2 one also with ``seernet.uncertainty`` and
``seernet.memory`` null, :func:`upgrade_v2`)::

    format, schema_version, kind        "perfseer-rt-predictor", 2, "seernet"
    device        {name, description}   description: words or an environment block
    feature_version, columns, op_vocabulary    the PerfGraph layout it was trained on
    metrics       [{name, unit}]        output order of every model
    training_data {configurations, architectures, families, batch_sizes, nodes,
                   flops_total, metrics, ops, notes} or null
                   ops: op type -> training architectures whose PerfGraph holds it
    accuracy      split -> model -> metric -> {mape, within_10, count, spearman}
    created, provenance {command, notes}, mig_gpu
    mode          "inference" | "train"   what one measurement was
    step          {engine, definition, optimizer, precision, threads, peak_mem_method,
                   dataset_device} or null: the training step a "train" predictor's
                   labels timed (required when mode is "train")
    <kind>        the section of that kind (see KIND_SECTIONS)

Every field is required (null where empty). A version-2 document (which
could leave out ``mode`` and ``step``, meaning "inference" and null) is
upgraded on reading by :func:`upgrade_v2`.

Kinds: ``"seernet"`` (a GNN in ONNX: models, normalization baked in, session
settings). Another kind adds its frozen dataclass to :data:`KIND_SECTIONS`;
its manifest then carries a section under its kind's name instead of
``seernet``. Today two manifests are read outside this schema, by the
registry (``perfseer_rt/predict/registry.py``):

* a user-calibrated CPU entry (``perfseer-rt calibrate``) is its base's
  seernet manifest plus ``calibration``, ``device.base`` and
  ``accuracy.test_kind``: those are set aside and the rest is checked here;
* kind ``"gpu"`` entries are made in memory from a GPU spec sheet, whose own
  strict schema is :mod:`perfseer_rt.gpu.spec_sheet`
  (:mod:`perfseer_rt.gpu.entries`, ``registry.SEPARATE_SCHEMA_KINDS``).

The ONNX predictor's inputs are built by :func:`concat_graphs` (training
imports it), named :data:`INPUT_NAMES`, run with the manifest's
``session.intra_op_num_threads`` (:data:`INTRA_OP_THREADS` when exported).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence, TypeVar, Union

import numpy as np

from perfseer_rt.errors import PerfSeerError

FORMAT = "perfseer-rt-predictor"
_T = TypeVar("_T")
SCHEMA_VERSION = 6
#: Inputs and output of every exported ONNX predictor, in this order.
INPUT_NAMES = ("x", "edge_index", "edge_attr", "u", "node_batch")
OUTPUT_NAMES = ("y",)
#: Threads an exported predictor runs with: its row scatters (ScatterND with a
#: reduction) race across threads in onnxruntime (issue #18048).
INTRA_OP_THREADS = 1


class ManifestError(PerfSeerError):
    """A manifest does not follow the schema (the message names the field)."""


class GraphInputError(PerfSeerError, ValueError):
    """Graphs that cannot be fed to a predictor (none, or one without nodes)."""


# ------------------------------------------------------------------- schema
@dataclass(frozen=True)
class Device:
    name: str
    description: Union[str, dict[str, Any]]


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str


@dataclass(frozen=True)
class Columns:
    node: tuple[str, ...]
    edge: tuple[str, ...]
    global_: tuple[str, ...]


@dataclass(frozen=True)
class ModelEntry:
    """One ONNX file: ``inputs``/``output`` give dtype and dims (ints or axis names)."""

    name: str
    file: str
    sha256: str
    outputs: tuple[str, ...]
    parameters: int
    opset: int
    inputs: dict[str, tuple[Union[str, int], ...]]
    output: dict[str, tuple[Union[str, int], ...]]
    input_order: tuple[str, ...]
    architecture: str


@dataclass(frozen=True)
class ColumnStats:
    """``(slog1p(x) if log1p else x) - mean) / std`` per column."""

    columns: tuple[str, ...]
    log1p: tuple[bool, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]


@dataclass(frozen=True)
class TargetStats:
    """``y = exp(t * std + mean)`` (``transform`` ``"log"``)."""

    transform: str
    mean: float
    std: float


@dataclass(frozen=True)
class Normalization:
    """The input normalisation and target transform baked into the ONNX files."""

    feature_version: str
    transform: str
    node: ColumnStats
    edge: ColumnStats
    global_: ColumnStats
    targets: dict[str, TargetStats]


@dataclass(frozen=True)
class Session:
    intra_op_num_threads: int


@dataclass(frozen=True)
class IntervalBin:
    """Quantiles of ``log(measured / predicted)`` for graphs whose distance
    score is at most ``max_score`` (null: any score) and whose batch size is
    at most ``max_batch`` (null: any batch), from ``count`` calibration
    residuals. A graph takes the first bin of its metric that takes it."""

    max_score: Union[float, None]
    max_batch: Union[int, None]
    lo: float
    hi: float
    count: int


#: Values of ``MetricInterval.scale``.
INTERVAL_SCALES = ("none", "disagreement")


@dataclass(frozen=True)
class MetricInterval:
    """Conformal interval of one metric: holds ``coverage`` of measurements.

    ``scale`` ``"none"`` (``floor`` null): a bin's ``lo``/``hi`` are the
    log-ratio bounds themselves. ``"disagreement"``: they are in units of
    ``floor + |gap|`` (``floor`` in log units; the gap of
    :class:`Disagreement`), so the interval of a graph on which the two
    models of the blend disagree more is wider in proportion."""

    coverage: float
    bins: tuple[IntervalBin, ...]
    scale: str
    floor: Union[float, None]


@dataclass(frozen=True)
class Disagreement:
    """How far apart the two models of a blend are on a graph, as an
    uncertainty signal (:mod:`perfseer_rt.predict.uncertainty`).

    The ONNX file of model ``model`` has a second output ``output``,
    ``float32[G, M]`` in the manifest's metric order: ``log(SeerNet) -
    log(trees)`` per metric (natural log, dimensionless); where the peak
    memory is the larger of two phases, the peak's gap is that phase's.
    ``thresholds``: metric -> the ``|gap|`` above which the warning fires
    (chosen on held-out data as the distance threshold is; a metric absent
    has none). ``calibration`` says how they were chosen and how they did."""

    model: str
    output: str
    thresholds: dict[str, float]
    calibration: dict[str, Any]


@dataclass(frozen=True)
class Uncertainty:
    """Distance score, out-of-distribution threshold and intervals
    (:mod:`perfseer_rt.predict.uncertainty`). ``reference_file`` holds the
    training graphs' features in score space (``float16[N, len(features)]``,
    ``.npy``; float32 is read too); ``calibration`` says on what it was calibrated and how the
    intervals and the warning did on held-out data."""

    k: int
    features: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    reference_file: str
    reference_sha256: str
    threshold: float
    intervals: dict[str, MetricInterval]
    calibration: dict[str, Any]
    disagreement: Union[Disagreement, None]


@dataclass(frozen=True)
class MemoryParts:
    """How the peak-memory output splits into parts the user can read.

    ``load`` and ``run`` are outputs (metrics) of the model: the peak while the
    session is created and while it runs, over the same baseline as ``peak``.
    ``combine`` is ``"max"`` (``peak`` = the larger phase) or ``"direct"`` (the
    ``peak`` output, the phases shown beside it). ``baseline_mb`` is the
    measured process memory of the runtime before the model is loaded, which
    ``peak`` does not include (``baseline`` says how it was measured)."""

    peak: str
    load: str
    run: str
    combine: str
    baseline_mb: Union[float, None]
    baseline: str


@dataclass(frozen=True)
class FieldScale:
    """One metric's shift between the training labels and what the shipped
    profiler measures today on real models the predictor never trained on.

    ``factor`` (dimensionless) multiplies the model's output as reported
    (the peak-memory factor also both memory phases): the median of
    ``measured / predicted`` over ``rows`` measured rows of ``sources``
    (user-check files). ``loo_mape_before`` / ``loo_mape_after`` (%) are the
    MAPE on those rows without it and with the factor fitted on the other
    sources only (leave one source out): it is kept only where that falls by
    at least ``training.seernet.recalibrate.MIN_GAIN`` points. ``measured``
    says on what CPU and how the rows were measured."""

    factor: float
    rows: int
    sources: tuple[str, ...]
    measured: str
    loo_mape_before: float
    loo_mape_after: float

    def apply(self, value: np.ndarray | float) -> np.ndarray:
        """The scaled value(s), in the metric's unit."""
        return np.asarray(value, dtype=np.float64) * self.factor


@dataclass(frozen=True)
class SeerNetSection:
    """Kind ``"seernet"``: GNN predictors in ONNX (normalisation baked in)."""

    models: tuple[ModelEntry, ...]
    default_model: str
    normalization: Normalization
    normalization_baked_in: bool
    session: Session
    uncertainty: Union[Uncertainty, None]
    memory: Union[MemoryParts, None]
    #: metric -> its field scale (:class:`FieldScale`); null: none
    field_scale: Union[dict[str, FieldScale], None]


@dataclass(frozen=True)
class Range:
    min: float
    max: float


@dataclass(frozen=True)
class MetricSummary:
    count: int
    min: Union[float, None]
    median: Union[float, None]
    max: Union[float, None]


@dataclass(frozen=True)
class TrainingData:
    """What the predictor saw; ``notes`` holds free-form provenance (source, rows)."""

    configurations: int
    architectures: int
    families: dict[str, int]
    batch_sizes: tuple[int, ...]
    nodes: Union[Range, None]
    flops_total: Union[Range, None]
    metrics: dict[str, MetricSummary]
    #: op type -> training architectures whose PerfGraph holds a node of it
    #: (null: not recorded; ``python -m training.seernet.training_ops``)
    ops: Union[dict[str, int], None]
    notes: dict[str, Any]


@dataclass(frozen=True)
class MetricAccuracy:
    """Test accuracy of one model on one metric: MAPE and within-10 % in %."""

    mape: Union[float, None]
    within_10: Union[float, None]
    count: int
    spearman: Union[float, None]


@dataclass(frozen=True)
class Provenance:
    command: Union[str, None]
    notes: dict[str, Any]


@dataclass(frozen=True)
class TrainStep:
    """What one label of a training-step predictor timed (``mode`` ``"train"``).

    ``definition`` is the step in words (forward, loss, backward, update);
    ``engine`` the framework that ran it (``"torch"``), not onnxruntime;
    ``peak_mem_method`` how its peak memory was read
    (:mod:`perfseer_rt.profile.hostmem`); ``dataset_device`` the ``device``
    field of its records.
    """

    engine: str
    definition: str
    optimizer: str
    precision: str
    threads: Union[int, None]
    peak_mem_method: Union[str, None]
    dataset_device: str


#: Values of ``mode``: what one measured label is.
MODES = ("inference", "train")

#: kind -> the dataclass of its section (stored under the kind's name).
KIND_SECTIONS: dict[str, type] = {"seernet": SeerNetSection}


@dataclass(frozen=True)
class Manifest:
    format: str
    schema_version: int
    kind: str
    device: Device
    feature_version: str
    columns: Columns
    op_vocabulary: tuple[str, ...]
    metrics: tuple[Metric, ...]
    training_data: Union[TrainingData, None]
    accuracy: dict[str, dict[str, dict[str, MetricAccuracy]]]
    created: str
    provenance: Provenance
    mig_gpu: Union[str, None]
    section: Any  # the KIND_SECTIONS[kind] instance, stored under the kind's name
    mode: str
    step: Union[TrainStep, None]

    @property
    def seernet(self) -> SeerNetSection:
        if not isinstance(self.section, SeerNetSection):
            raise ManifestError(f"predictor {self.device.name!r} is of kind {self.kind!r}, "
                                "not a seernet predictor")
        return self.section

    @property
    def metric_names(self) -> list[str]:
        return [m.name for m in self.metrics]

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (``global_`` written as ``global``; fields added
        within version 2 left out at their defaults, as older manifests have them)."""
        doc = {f.name: _dump(getattr(self, f.name)) for f in dataclasses.fields(self)
               if f.name != "section"
               and not (f.default is not dataclasses.MISSING and getattr(self, f.name) == f.default)}
        doc[self.kind] = _dump(self.section)
        return doc


# ------------------------------------------------------------------ reading
def _key(name: str) -> str:
    return name.rstrip("_")


def _dump(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {_key(f.name): _dump(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


def _parse(tp: Any, value: Any, where: str) -> Any:
    """``value`` (JSON) as type ``tp``; ManifestError naming ``where`` if it is not."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        errors = []
        for arm in typing.get_args(tp):
            if arm is type(None):
                if value is None:
                    return None
                continue
            try:
                return _parse(arm, value, where)
            except ManifestError as exc:
                errors.append(str(exc))
        raise ManifestError(errors[0] if len(errors) == 1 else
                            f"{where}: {value!r:.60} is none of the allowed types")
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _parse_fields(tp, value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise ManifestError(f"{where}: expected a list, got {type(value).__name__}")
        (arm, _) = typing.get_args(tp)
        return tuple(_parse(arm, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ManifestError(f"{where}: expected an object, got {type(value).__name__}")
        _, arm = typing.get_args(tp)
        return {str(k): _parse(arm, v, f"{where}.{k}") for k, v in value.items()}
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ManifestError(f"{where}: expected a number, got {value!r:.60}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ManifestError(f"{where}: expected an integer, got {value!r:.60}")
        return value
    if tp in (str, bool):
        if not isinstance(value, tp):
            raise ManifestError(f"{where}: expected {tp.__name__}, got {value!r:.60}")
        return value
    raise TypeError(f"manifest schema: unsupported type {tp!r} at {where}")  # a schema bug


@functools.lru_cache(maxsize=None)
def _schema_of(cls: type) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``cls``'s resolved field types and field names (resolving the string
    annotations is most of a manifest's parse time: once per class)."""
    return typing.get_type_hints(cls), tuple(f.name for f in dataclasses.fields(cls))


def _parse_fields(cls: type, doc: Any, where: str, skip: Sequence[str] = (),
                  allow: Sequence[str] = ()) -> dict[str, Any] | Any:
    if not isinstance(doc, dict):
        raise ManifestError(f"{where or 'manifest'}: expected an object, got {type(doc).__name__}")
    hints, names = _schema_of(cls)
    fields = [f for f in names if f not in skip]
    prefix = f"{where}." if where else ""
    for f in fields:
        if _key(f) not in doc:
            raise ManifestError(f"manifest field {prefix}{_key(f)} is missing")
    unknown = sorted(set(doc) - {_key(f) for f in fields} - set(allow))
    if unknown:
        raise ManifestError(f"manifest field {prefix}{unknown[0]} is not in schema version "
                            f"{SCHEMA_VERSION}")
    values = {f: _parse(hints[f], doc[_key(f)], f"{prefix}{_key(f)}") for f in fields}
    return values if skip else cls(**values)


def parse_section(cls: type[_T], doc: Any, where: str = "") -> _T:
    """``doc`` as the frozen dataclass ``cls``, strictly (the reader of every
    manifest kind).

    Raises:
        ManifestError: naming the missing, unknown or mistyped field.
    """
    return typing.cast(_T, _parse_fields(cls, doc, where))  # no skip: an instance of cls


def parse_manifest(doc: Mapping[str, Any]) -> Manifest:
    """A :class:`Manifest` from its JSON document, strictly (see module doc).

    Raises:
        ManifestError: another format or version, a missing or unknown field,
            a value of the wrong type, or a section that does not fit.
    """
    if not isinstance(doc, dict):
        raise ManifestError(f"manifest: expected an object, got {type(doc).__name__}")
    doc = upgrade(doc)
    fmt = doc.get("format")
    if fmt != FORMAT or doc.get("schema_version") != SCHEMA_VERSION:
        raise ManifestError(
            f"manifest format {fmt!r} version {doc.get('schema_version')!r}: this perfseer-rt "
            f"reads {FORMAT!r} version {SCHEMA_VERSION} (an older manifest is upgraded by "
            "`python -m training.seernet.migrate_manifest PATH`)")
    kind = doc.get("kind")
    if kind not in KIND_SECTIONS:
        raise ManifestError(f"manifest field kind: unknown kind {kind!r}; this perfseer-rt "
                            f"knows {', '.join(sorted(KIND_SECTIONS))}")
    values = _parse_fields(Manifest, doc, "", skip=("section",), allow=(kind,))
    if kind not in doc:
        raise ManifestError(f"manifest field {kind} (the section of kind {kind!r}) is missing")
    section = _parse_fields(KIND_SECTIONS[kind], doc[kind], kind)
    manifest = Manifest(**values, section=section)
    _check(manifest)
    return manifest


def _check(m: Manifest) -> None:
    """Cross-field rules the types cannot say."""
    if m.mode not in MODES:
        raise ManifestError(f"manifest field mode: {m.mode!r} is not one of {list(MODES)}")
    if m.mode == "train" and m.step is None:
        raise ManifestError("manifest field step is missing: a predictor of mode 'train' "
                            "says which training step its labels timed")
    if m.mode != "train" and m.step is not None:
        raise ManifestError(f"manifest field step: set on a predictor of mode {m.mode!r}")
    if isinstance(m.section, SeerNetSection):
        names = [e.name for e in m.section.models]
        if m.section.default_model not in names:
            raise ManifestError(f"manifest field seernet.default_model: {m.section.default_model!r} "
                                f"is not one of the models {names}")
        for i, e in enumerate(m.section.models):
            if list(e.outputs) != m.metric_names:
                raise ManifestError(f"manifest field seernet.models[{i}].outputs: {list(e.outputs)} "
                                    f"differ from metrics {m.metric_names}")
            if tuple(e.input_order) != INPUT_NAMES:
                raise ManifestError(f"manifest field seernet.models[{i}].input_order: "
                                    f"{list(e.input_order)}, expected {list(INPUT_NAMES)}")
        mem = m.section.memory
        if mem is not None:
            for part in ("peak", "load", "run"):
                if getattr(mem, part) not in m.metric_names:
                    raise ManifestError(f"manifest field seernet.memory.{part}: "
                                        f"{getattr(mem, part)!r} is not one of the metrics")
            if mem.combine not in ("max", "direct"):
                raise ManifestError(f"manifest field seernet.memory.combine: {mem.combine!r}, "
                                    "expected 'max' or 'direct'")
        for name, fs in (m.section.field_scale or {}).items():
            if name not in m.metric_names:
                raise ManifestError(f"manifest field seernet.field_scale.{name}: not one of the metrics")
            if not fs.factor > 0:
                raise ManifestError(f"manifest field seernet.field_scale.{name}.factor: {fs.factor}, "
                                    "expected > 0")
        unc = m.section.uncertainty
        if unc is not None:
            if not len(unc.features) == len(unc.mean) == len(unc.std):
                raise ManifestError("manifest field seernet.uncertainty.mean/std: lengths differ "
                                    "from features")
            for name, iv in unc.intervals.items():
                if name not in m.metric_names:
                    raise ManifestError(f"manifest field seernet.uncertainty.intervals.{name}: "
                                        "not one of the metrics")
                if not iv.bins or iv.bins[-1].max_score is not None or iv.bins[-1].max_batch is not None:
                    raise ManifestError(f"manifest field seernet.uncertainty.intervals.{name}.bins: "
                                        "the last bin must take any score and batch (max_score and "
                                        "max_batch null)")
                if iv.scale not in INTERVAL_SCALES:
                    raise ManifestError(f"manifest field seernet.uncertainty.intervals.{name}.scale: "
                                        f"{iv.scale!r} is not one of {list(INTERVAL_SCALES)}")
                if iv.scale == "disagreement" and (unc.disagreement is None or iv.floor is None
                                                   or not iv.floor > 0):
                    raise ManifestError(f"manifest field seernet.uncertainty.intervals.{name}.scale: "
                                        "'disagreement' needs seernet.uncertainty.disagreement and "
                                        "a floor > 0")
                if iv.scale == "none" and iv.floor is not None:
                    raise ManifestError(f"manifest field seernet.uncertainty.intervals.{name}.floor: "
                                        "set on an unscaled interval")
            dis = unc.disagreement
            if dis is not None:
                if dis.model not in names:
                    raise ManifestError(f"manifest field seernet.uncertainty.disagreement.model: "
                                        f"{dis.model!r} is not one of the models {names}")
                for name, t in dis.thresholds.items():
                    if name not in m.metric_names or not t > 0:
                        raise ManifestError(f"manifest field seernet.uncertainty.disagreement."
                                            f"thresholds.{name}: a metric and a threshold > 0 expected")


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read and parse ``manifest.json`` (errors name the file and the field)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read the manifest ({exc})") from None
    try:
        return parse_manifest(doc)
    except ManifestError as exc:
        raise ManifestError(f"{path}: {exc}") from None


def upgrade(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """``doc`` read up to the current schema version if it is an older
    version of this format (2 to 5, in steps); any other document is returned
    as it is (the same object, so a caller can tell nothing was upgraded)."""
    if doc.get("format") == FORMAT and doc.get("schema_version") == 2:
        doc = upgrade_v2(doc)
    if doc.get("format") == FORMAT and doc.get("schema_version") == 3:
        doc = upgrade_v3(doc)
    if doc.get("format") == FORMAT and doc.get("schema_version") == 4:
        doc = upgrade_v4(doc)
    if doc.get("format") == FORMAT and doc.get("schema_version") == 5:
        doc = upgrade_v5(doc)
    return doc


def upgrade_v5(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A schema-version-5 document as version 6: the same predictor, its
    training data's op types not recorded (``training_data.ops`` null)."""
    out = {**doc, "schema_version": 6}
    td = doc.get("training_data")
    if isinstance(td, dict):
        if "ops" in td:
            raise ManifestError("manifest field training_data.ops is not in schema version 5")
        out["training_data"] = {**td, "ops": None}
    return out


def upgrade_v4(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A schema-version-4 document as version 5: the same predictor, without
    a disagreement signal (``seernet.uncertainty.disagreement`` null), its
    intervals unscaled (``scale`` ``"none"``, ``floor`` null)."""
    out = {**doc, "schema_version": 5}
    section = doc.get("seernet")
    unc = section.get("uncertainty") if isinstance(section, dict) else None
    if isinstance(section, dict) and isinstance(unc, dict):
        if "disagreement" in unc:
            raise ManifestError("manifest field seernet.uncertainty.disagreement is not in schema version 4")
        intervals = unc.get("intervals")
        if isinstance(intervals, dict):
            intervals = {m: {**iv, "scale": "none", "floor": None}
                         if isinstance(iv, dict) and "scale" not in iv and "floor" not in iv else iv
                         for m, iv in intervals.items()}
        out["seernet"] = {**section, "uncertainty": {**unc, "intervals": intervals, "disagreement": None}}
    return out


def upgrade_v3(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A schema-version-3 document as version 4 (read on by :func:`upgrade_v4`): the same predictor, without
    a field scale (``seernet.field_scale`` null), its interval bins taking
    any batch size (``max_batch`` null)."""
    out = {**doc, "schema_version": 4}
    if isinstance(doc.get("seernet"), dict):
        if "field_scale" in doc["seernet"]:
            raise ManifestError("manifest field seernet.field_scale is not in schema version 3")
        section = {**doc["seernet"], "field_scale": None}
        unc = section.get("uncertainty")
        if isinstance(unc, dict) and isinstance(unc.get("intervals"), dict):
            section["uncertainty"] = {**unc, "intervals": {
                m: {**iv, "bins": [{**b, "max_batch": None} if isinstance(b, dict) else b
                                   for b in iv.get("bins", [])]} if isinstance(iv, dict) else iv
                for m, iv in unc["intervals"].items()}}
        out["seernet"] = section
    return out


def upgrade_v2(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A schema-version-2 document as version 3 (read on by :func:`upgrade_v3`):
    the same predictor, without intervals or memory parts
    (``seernet.uncertainty`` and ``seernet.memory`` null); an absent
    ``mode``/``step`` (allowed in version 2) becomes ``"inference"``/null,
    what it meant there."""
    out = {"mode": "inference", "step": None, **doc, "schema_version": 3}
    if isinstance(doc.get("seernet"), dict):
        section = dict(doc["seernet"])
        for name in ("uncertainty", "memory"):
            if name in section:
                raise ManifestError(f"manifest field seernet.{name} is not in schema version 2")
            section[name] = None
        out["seernet"] = section
    return out


def upgrade_v1(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A ``perfseer-rt-predictor/1`` document as schema version 2 (same predictions:
    the ONNX files, normalisation and thread settings are carried over as they are)."""
    if doc.get("format") != "perfseer-rt-predictor/1":
        raise ManifestError(f"manifest format {doc.get('format')!r} is not version 1")
    known_td = ("configurations", "architectures", "families", "batch_sizes", "nodes",
                "flops_total", "metrics")
    td = doc.get("training_data")
    training_data = None if td is None else {
        **{k: td.get(k) or None for k in ("nodes", "flops_total")},
        **{k: td[k] for k in known_td if k not in ("nodes", "flops_total")},
        "metrics": {m: {"count": s.get("count", 0), "min": s.get("min"),
                        "median": s.get("median"), "max": s.get("max")}
                    for m, s in td["metrics"].items()},
        "notes": {k: v for k, v in td.items() if k not in known_td}}
    accuracy = {split: {model: {metric: {k: acc.get(k) for k in ("mape", "within_10", "spearman")}
                                | {"count": int(acc.get("count") or 0)}
                                for metric, acc in per_model.items() if isinstance(acc, dict)}
                        for model, per_model in per_split.items()}
                for split, per_split in (doc.get("accuracy") or {}).items()}
    report = dict(doc.get("report") or {})
    models = [{**{k: v for k, v in e.items() if k != "kind"}, "architecture": e.get("kind", "SeerNet")}
              for e in doc["models"]]
    return {
        "format": FORMAT, "schema_version": SCHEMA_VERSION, "kind": "seernet",
        "device": doc["device"], "feature_version": doc["feature_version"],
        "columns": doc["columns"], "op_vocabulary": doc["op_vocabulary"],
        "metrics": doc["metrics"], "training_data": training_data, "accuracy": accuracy,
        "created": doc["created"],
        "provenance": {"command": report.pop("command", None), "notes": report},
        "mig_gpu": doc.get("mig_gpu"), "mode": "inference", "step": None,
        "seernet": {"models": models, "default_model": doc["default_model"],
                    "normalization": doc["normalization"],
                    "normalization_baked_in": doc["normalization_baked_in"],
                    "session": doc["session"], "uncertainty": None, "memory": None,
                    "field_scale": None},
    }


# ------------------------------------------------------- predictor inputs
def concat_graphs(xs: Sequence[np.ndarray], edge_indices: Sequence[np.ndarray],
                  edge_attrs: Sequence[np.ndarray], us: Sequence[np.ndarray],
                  dtype: Any = np.float32) -> dict[str, np.ndarray]:
    """Many graphs as one disjoint graph: the ONNX predictor's inputs.

    Returns ``x [N, Fn]``, ``edge_index int64[2, E]`` (local node ids shifted
    by each graph's node offset), ``edge_attr [E, Fe]``, ``u [G, Fg]`` and
    ``node_batch int64[N]`` (graph id of every node). Every graph needs at
    least one node (a graph without nodes has no max/softmax readout).

    Raises:
        GraphInputError: no graphs, or a graph without nodes.
    """
    counts = np.array([len(x) for x in xs], dtype=np.int64)
    if len(counts) == 0:
        raise GraphInputError("concat_graphs: no graphs given")
    if (counts == 0).any():
        bad = int(np.flatnonzero(counts == 0)[0])
        raise GraphInputError(f"concat_graphs: graph {bad} has no nodes; every graph needs >= 1 node")
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return {  # one pass each: concatenate straight into the predictor's dtypes
        "x": np.concatenate(xs, dtype=dtype, casting="same_kind"),
        "edge_index": np.concatenate([np.asarray(ei, dtype=np.int64).reshape(2, -1) + off
                                      for ei, off in zip(edge_indices, offsets)], axis=1),
        "edge_attr": np.concatenate(edge_attrs, dtype=dtype, casting="same_kind"),
        "u": np.stack(us, dtype=dtype, casting="same_kind"),
        "node_batch": np.repeat(np.arange(len(counts), dtype=np.int64), counts),
    }
