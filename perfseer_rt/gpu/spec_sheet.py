"""The one schema of a GPU spec sheet (``perfseer-rt-gpu-spec/1``).

A spec sheet describes an NVIDIA GPU by the figures its datasheet and
architecture whitepaper publish, each with its public source. It is all the
GPU prior knows about a device (:class:`perfseer_rt.gpu.specs.GpuSpec` is
derived from it), so it is read strictly: a missing or unknown field, a wrong
type, a non-finite, negative or implausible value, or figures that contradict
each other is a :class:`SpecSheetError` whose one-line message names the field.

Units are in the field names. Every tensor-core peak is *dense* (NVIDIA's
datasheets often print the 2:4-sparsity figure first: halve it). The fp16
tensor peak is given twice: with fp16 accumulate (the headline figure) and
with fp32 accumulate, which is what PyTorch autocast and cuBLAS use; GeForce
cards of the Ampere, Ada and Blackwell generations run the latter at half
rate, datacenter and professional cards at full rate. ``fp8_tensor_tflops`` is
the dense FP8 peak with fp32 accumulate (what scaled matmuls use).

"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu.specs import GpuSpec

FORMAT = "perfseer-rt-gpu-spec/1"
#: Bigger than any spec sheet; a larger file is refused unread.
MAX_FILE_BYTES = 1 << 20

#: architecture -> the compute capabilities of its chips (CUDA's list of GPUs).
COMPUTE_CAPABILITIES: dict[str, tuple[str, ...]] = {
    "pascal": ("6.0", "6.1", "6.2"), "volta": ("7.0", "7.2"), "turing": ("7.5",),
    "ampere": ("8.0", "8.6", "8.7"), "ada": ("8.9",), "hopper": ("9.0",),
    "blackwell": ("10.0", "10.1", "10.3", "11.0", "12.0", "12.1"),
}
#: architecture -> FP32 cores per SM its chips have (GP100/GA100: 64; the others' big SMs: 128).
FP32_CORES_PER_SM: dict[str, tuple[int, ...]] = {
    "pascal": (64, 128), "volta": (64,), "turing": (64,), "ampere": (64, 128),
    "ada": (128,), "hopper": (128,), "blackwell": (128,),
}
#: The first architecture with each tensor-core format.
_TENSOR_FROM = {"fp16": "volta", "tf32": "ampere", "bf16": "ampere", "fp8": "ada"}
_ORDER = tuple(COMPUTE_CAPABILITIES)
FORM_FACTORS = ("sxm", "pcie", "mxm", "soc")
VENDORS = ("NVIDIA",)
MIG_NAME = re.compile(r"^[a-z0-9][a-z0-9.\-]{0,31}$")

#: fp32_tflops may differ this much (relative) from 2 x SMs x cores x clock:
#: NVIDIA's own peaks are computed at slightly different clocks.
FP32_TOLERANCE = 0.15
#: Slack (relative) on the comparisons that hold exactly on paper.
_SLACK = 0.02


class SpecSheetError(PerfSeerError):
    """A spec sheet that does not follow the schema: one line naming the
    field (``field``; None for a problem with the whole document) and, where
    it was read from a file, the file (``where``)."""

    def __init__(self, field_name: str | None, problem: str, where: str | None = None) -> None:
        what = f"spec field {field_name}: {problem}" if field_name else problem
        super().__init__(f"{where}: {what}" if where else what)
        self.field, self.problem, self.where = field_name, problem, where

    def at(self, where: str) -> "SpecSheetError":
        """The same error, said of the file ``where``."""
        return SpecSheetError(self.field, self.problem, where)


@dataclass(frozen=True)
class _Field:
    """How one field is read: kind int/float/str/choice, unit, plausible range."""

    name: str
    kind: str
    unit: str = ""
    lo: float = 0.0
    hi: float = 0.0
    nullable: bool = False
    optional: bool = False   # may be left out (read as null)
    choices: tuple[str, ...] = ()




def _tensor(name: str, optional: bool = False) -> _Field:
    """A dense tensor-core peak, TFLOPS; null where the GPU has none."""
    return _Field(name, "float", "TFLOPS", 0.05, 50000, nullable=True, optional=optional)


#: The schema, in the order sheets are written.
FIELDS: tuple[_Field, ...] = (
    _Field("name", "str"),
    _Field("vendor", "choice", choices=VENDORS),
    _Field("architecture", "choice", choices=_ORDER),
    _Field("compute_capability", "str"),
    _Field("form_factor", "choice", choices=FORM_FACTORS),
    _Field("sms", "int", "SMs", 1, 1000),
    _Field("fp32_cores_per_sm", "int", "cores", 1, 512),
    _Field("boost_clock_mhz", "float", "MHz", 100, 5000),
    _Field("memory_gib", "float", "GiB", 0.5, 4096),
    _Field("memory_bandwidth_gbs", "float", "GB/s", 10, 20000),
    _Field("l2_cache_mb", "float", "MB", 0.25, 1024),
    _Field("fp32_tflops", "float", "TFLOPS", 0.05, 1000),
    _tensor("tf32_tensor_tflops"),
    _tensor("fp16_tensor_tflops"),
    _tensor("fp16_tensor_fp32acc_tflops"),
    _tensor("bf16_tensor_fp32acc_tflops"),
    _tensor("fp8_tensor_tflops", optional=True),
    _Field("tdp_w", "float", "W", 5, 5000),
    _Field("max_power_limit_w", "float", "W", 5, 5000, nullable=True, optional=True),
    _Field("mig", "str", nullable=True, optional=True),
)
FIELD_NAMES = tuple(f.name for f in FIELDS)
NUMERIC_FIELDS = tuple(f.name for f in FIELDS if f.kind in ("int", "float"))
_BY_NAME = {f.name: f for f in FIELDS}


@dataclass(frozen=True)
class SpecSheet:
    """One GPU's spec sheet (``perfseer-rt-gpu-spec/1``); build it with
    :meth:`from_dict` or :func:`read_sheet`, which validate it."""

    name: str                   #: product name, as nvidia-smi prints it where known
    vendor: str                 #: "NVIDIA"
    architecture: str           #: pascal | volta | turing | ampere | ada | hopper | blackwell
    compute_capability: str     #: "8.9"
    form_factor: str            #: sxm | pcie | mxm | soc
    sms: int                    #: streaming multiprocessors
    fp32_cores_per_sm: int      #: FP32 ("CUDA") cores per SM
    boost_clock_mhz: float      #: boost clock, MHz
    memory_gib: float           #: device memory as sold, GiB ("80 GB" HBM is 80 GiB)
    memory_bandwidth_gbs: float  #: peak memory bandwidth, GB/s
    l2_cache_mb: float          #: L2 cache, MB
    fp32_tflops: float          #: FP32 peak without tensor cores, TFLOPS
    tf32_tensor_tflops: float | None          #: dense TF32 tensor peak; None before Ampere
    fp16_tensor_tflops: float | None          #: dense fp16 tensor peak, fp16 accumulate; None: no tensor cores
    fp16_tensor_fp32acc_tflops: float | None  #: dense fp16 tensor peak, fp32 accumulate (PyTorch AMP)
    bf16_tensor_fp32acc_tflops: float | None  #: dense bf16 tensor peak; None where bf16 is unsupported
    fp8_tensor_tflops: float | None           #: dense fp8 tensor peak, fp32 accumulate; None: none
    tdp_w: float                #: board power (TDP / TGP), W
    max_power_limit_w: float | None  #: highest settable power limit, W, where published
    mig: str | None             #: MIG profile table (perfseer_rt.predict.mig.MIG_PROFILES key)
    #: field -> its public source (document title, table or page, URL); every numeric field has one
    sources: Mapping[str, str] = field(default_factory=dict, hash=False)

    @classmethod
    def from_dict(cls, doc: Any) -> "SpecSheet":
        """Validate a parsed JSON document. Raises :class:`SpecSheetError`."""
        return parse_sheet(doc)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (``format`` first, fields in schema order)."""
        out: dict[str, Any] = {"format": FORMAT}
        out.update({f: getattr(self, f) for f in FIELD_NAMES})
        out["sources"] = {k: self.sources[k] for k in FIELD_NAMES if k in self.sources}
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1) + "\n"

    @property
    def derived_fp32_tflops(self) -> float:
        """2 FLOP per FMA x SMs x FP32 cores per SM x boost clock, TFLOPS."""
        return 2.0 * self.sms * self.fp32_cores_per_sm * self.boost_clock_mhz / 1e6

    def to_gpu_spec(self) -> GpuSpec:
        """The prior's view (GB, GB/s, MHz, GFLOP/s, MB); the tensor-core peak is
        the fp16 fp32-accumulate one (what PyTorch autocast runs)."""
        def gflops(tflops: float | None) -> float | None:
            return tflops * 1000.0 if tflops is not None else None

        return GpuSpec(name=self.name, mem_gb=self.memory_gib, mem_bw_gbs=self.memory_bandwidth_gbs,
                       sms=self.sms, cores_per_sm=self.fp32_cores_per_sm, clock_mhz=self.boost_clock_mhz,
                       fp32_gflops=self.fp32_tflops * 1000.0, l2_mb=self.l2_cache_mb,
                       tc16_gflops=gflops(self.fp16_tensor_fp32acc_tflops),
                       tf32_gflops=gflops(self.tf32_tensor_tflops),
                       bf16_gflops=gflops(self.bf16_tensor_fp32acc_tflops),
                       arch=self.architecture, tdp_w=self.tdp_w)

    def with_values(self, values: Mapping[str, Any], source: str) -> "SpecSheet":
        """A copy with ``values`` (field -> typed value) replaced, each sourced
        to ``source``; validated again."""
        doc = self.to_dict()
        for k, v in values.items():
            doc[k] = v
            doc["sources"][k] = source
        return parse_sheet(doc)


def _number(name: str, value: Any, spec: _Field) -> float | int | None:
    """``value`` checked as field ``spec`` (int or float)."""
    if value is None:
        if spec.nullable:
            return None
        raise SpecSheetError(name, "is null; a number is required")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecSheetError(name, f"expected a number in {spec.unit}, got {type(value).__name__} {value!r:.40}")
    if not math.isfinite(value):
        raise SpecSheetError(name, f"{value} is not a finite number")
    if spec.kind == "int" and not float(value).is_integer():
        raise SpecSheetError(name, f"expected a whole number of {spec.unit}, got {value:g}")
    if value <= 0:
        raise SpecSheetError(name, f"{value:g} {spec.unit} must be positive")
    if not spec.lo <= value <= spec.hi:
        raise SpecSheetError(name, f"{value:g} {spec.unit} is not plausible (expected {spec.lo:g}-{spec.hi:g})")
    return int(value) if spec.kind == "int" else float(value)


def _text(name: str, value: Any, spec: _Field) -> str | None:
    if value is None and spec.nullable:
        return None
    if not isinstance(value, str):
        raise SpecSheetError(name, f"expected a string, got {type(value).__name__} {value!r:.40}")
    if not value.strip() or len(value) > 200 or not value.isprintable():
        raise SpecSheetError(name, f"{value!r:.60} is not a name (1-200 printable characters)")
    if spec.choices and value not in spec.choices:
        raise SpecSheetError(name, f"{value!r} is not one of {', '.join(spec.choices)}")
    return value


def parse_sheet(doc: Any) -> SpecSheet:
    """A validated :class:`SpecSheet` from a parsed JSON document.

    Raises:
        SpecSheetError: the first problem found, naming its field.
    """
    if not isinstance(doc, dict):
        raise SpecSheetError(None, f"a spec sheet is a JSON object, not {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        got = "missing" if "format" not in doc else f"{doc['format']!r:.40} is not supported"
        raise SpecSheetError("format", f"{got} (expected {FORMAT!r})")
    for key in doc:
        if key not in _BY_NAME and key not in ("format", "sources"):
            raise SpecSheetError(str(key)[:60], f"unknown field (the fields are {', '.join(FIELD_NAMES)})")
    values: dict[str, Any] = {}
    for spec in FIELDS:
        if spec.name not in doc and not spec.optional:
            raise SpecSheetError(spec.name, "missing" + (" (write null where it does not apply)"
                                                         if spec.nullable else ""))
        raw = doc.get(spec.name)
        values[spec.name] = (_number(spec.name, raw, spec) if spec.kind in ("int", "float")
                             else _text(spec.name, raw, spec))
    sources = _sources(doc.get("sources"), values)
    sheet = SpecSheet(**values, sources=sources)
    check_consistency(sheet)
    return sheet


def _sources(raw: Any, values: Mapping[str, Any]) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise SpecSheetError("sources", "missing or not an object {field: public source}")
    for key, text in raw.items():
        if key not in _BY_NAME:
            raise SpecSheetError(f"sources.{str(key)[:60]}", "not a field of the sheet")
        if not isinstance(text, str) or len(text.strip()) < 3:
            raise SpecSheetError(f"sources.{key}", "expected the source as text (document, table, URL)")
    for name in NUMERIC_FIELDS:
        if values[name] is not None and name not in raw:
            raise SpecSheetError(f"sources.{name}", "missing: every figure needs its public source "
                                 "(document title, table or page, URL; say so where it is derived)")
    return {k: raw[k] for k in FIELD_NAMES if k in raw}


def _since(arch: str, fmt: str) -> bool:
    return _ORDER.index(arch) >= _ORDER.index(_TENSOR_FROM[fmt])


def check_consistency(s: SpecSheet) -> None:
    """The figures against each other and against the architecture.

    Raises:
        SpecSheetError: naming the field that contradicts the others.
    """
    arch = s.architecture
    if s.compute_capability not in COMPUTE_CAPABILITIES[arch]:
        raise SpecSheetError("compute_capability", f"{s.compute_capability!r} is not a {arch} compute "
                             f"capability ({', '.join(COMPUTE_CAPABILITIES[arch])})")
    if s.fp32_cores_per_sm not in FP32_CORES_PER_SM[arch]:
        raise SpecSheetError("fp32_cores_per_sm", f"{s.fp32_cores_per_sm} is not what a {arch} SM has "
                             f"({' or '.join(map(str, FP32_CORES_PER_SM[arch]))})")
    for name, fmt in (("fp16_tensor_tflops", "fp16"), ("fp16_tensor_fp32acc_tflops", "fp16"),
                      ("tf32_tensor_tflops", "tf32"), ("bf16_tensor_fp32acc_tflops", "bf16"),
                      ("fp8_tensor_tflops", "fp8")):
        has = getattr(s, name) is not None
        if has and not _since(arch, fmt):
            raise SpecSheetError(name, f"{arch} GPUs have no {fmt} tensor cores (write null)")
        if not has and _since(arch, fmt) and fmt != "fp8":
            raise SpecSheetError(name, f"is null, but {arch} GPUs have {fmt} tensor cores")
    derived = s.derived_fp32_tflops
    off = abs(s.fp32_tflops - derived) / derived
    if off > FP32_TOLERANCE:
        raise SpecSheetError("fp32_tflops", f"{s.fp32_tflops:g} TFLOPS is {100 * off:.0f} % off 2 x sms x "
                             f"fp32_cores_per_sm x boost_clock_mhz = {derived:.1f} TFLOPS (expected within "
                             f"{100 * FP32_TOLERANCE:.0f} %; check the SM count and the boost clock)")
    _check_tensor_peaks(s)
    if s.max_power_limit_w is not None and s.max_power_limit_w < s.tdp_w * (1 - _SLACK):
        raise SpecSheetError("max_power_limit_w", f"{s.max_power_limit_w:g} W is below tdp_w ({s.tdp_w:g} W)")
    if s.mig is not None and not MIG_NAME.match(s.mig):
        raise SpecSheetError("mig", f"{s.mig!r:.40} is not a MIG table name (e.g. 'h100-80gb')")


def _check_tensor_peaks(s: SpecSheet) -> None:
    for name in ("tf32_tensor_tflops", "fp16_tensor_tflops", "fp16_tensor_fp32acc_tflops",
                 "bf16_tensor_fp32acc_tflops", "fp8_tensor_tflops"):
        v = getattr(s, name)
        if v is not None and v < s.fp32_tflops * (1 - _SLACK):
            raise SpecSheetError(name, f"{v:g} TFLOPS is below fp32_tflops ({s.fp32_tflops:g}); a tensor-core "
                                 "peak is never below the FP32 one (a unit or a per-SM figure?)")
    f16, f16_32, bf16 = s.fp16_tensor_tflops, s.fp16_tensor_fp32acc_tflops, s.bf16_tensor_fp32acc_tflops
    if f16 is not None and f16_32 is not None and f16_32 > f16 * (1 + _SLACK):
        raise SpecSheetError("fp16_tensor_fp32acc_tflops", f"{f16_32:g} TFLOPS is above fp16_tensor_tflops "
                             f"({f16:g}); fp32 accumulate never runs faster than fp16 accumulate")
    if bf16 is not None and f16_32 is not None and abs(bf16 - f16_32) > f16_32 * 0.05:
        raise SpecSheetError("bf16_tensor_fp32acc_tflops", f"{bf16:g} TFLOPS differs from "
                             f"fp16_tensor_fp32acc_tflops ({f16_32:g}); tensor cores run bf16 and fp16 with "
                             "fp32 accumulate at one rate (a sparse or fp16-accumulate figure?)")
    tf32 = s.tf32_tensor_tflops
    if tf32 is not None and f16_32 is not None and tf32 > f16_32 * (0.5 + _SLACK):
        raise SpecSheetError("tf32_tensor_tflops", f"{tf32:g} TFLOPS is above half of fp16_tensor_fp32acc_tflops "
                             f"({f16_32:g}); TF32 runs at half the fp16 fp32-accumulate rate at most "
                             "(a sparse figure?)")
    if s.fp8_tensor_tflops is not None and f16_32 is not None and s.fp8_tensor_tflops < f16_32 * (1 - _SLACK):
        raise SpecSheetError("fp8_tensor_tflops", f"{s.fp8_tensor_tflops:g} TFLOPS is below "
                             f"fp16_tensor_fp32acc_tflops ({f16_32:g}); fp8 is never slower than fp16")


def check_mig(sheet: SpecSheet, tables: Iterable[str]) -> None:
    """``sheet.mig`` names one of ``tables`` (the MIG profile tables,
    ``perfseer_rt.predict.mig.MIG_PROFILES``, passed in: gpu/ does not import predict/)."""
    known = sorted(tables)
    if sheet.mig is not None and sheet.mig not in known:
        raise SpecSheetError("mig", f"{sheet.mig!r} is not a MIG profile table ({', '.join(known)}); "
                             "write null for a GPU without MIG")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise SpecSheetError(str(k)[:60], "given twice")
        out[k] = v
    return out


def loads_sheet(text: str, origin: str | None = None) -> SpecSheet:
    """Parse and validate a sheet's JSON text; ``origin`` (a path) names it in errors."""
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise SpecSheetError(None, f"not JSON ({exc.msg}, line {exc.lineno} column {exc.colno})",
                             origin) from None
    return parse_sheet(doc)


def read_sheet(path: Union[str, Path]) -> SpecSheet:
    """Read and validate a spec sheet file.

    Raises:
        SpecSheetError: unreadable, not JSON, or not following the schema
            (the message starts with the path and names the field).
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise SpecSheetError(None, f"{size} bytes is too large for a spec sheet", str(path))
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise SpecSheetError(None, f"cannot read the spec sheet: {reason}", str(path)) from None
    try:
        return loads_sheet(text, origin=str(path))
    except SpecSheetError as exc:
        raise (exc if exc.where else exc.at(str(path))) from None


def parse_assignment(text: str) -> tuple[str, Any]:
    """``FIELD=VALUE`` (a ``--set`` option) as the field and its typed value
    (a number for numeric fields, ``null`` for None where allowed).

    Raises:
        SpecSheetError: unknown field or a value of the wrong type.
    """
    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    if not sep or not name:
        raise SpecSheetError(None, f"--set {text!r:.60}: expected FIELD=VALUE, e.g. --set boost_clock_mhz=2100")
    spec = _BY_NAME.get(name)
    if spec is None:
        raise SpecSheetError(name[:60], f"unknown field (the fields are {', '.join(FIELD_NAMES)})")
    if raw.lower() in ("null", "none", ""):
        return name, None
    if spec.kind in ("int", "float"):
        try:
            return name, int(raw) if spec.kind == "int" else float(raw)
        except ValueError:
            raise SpecSheetError(name, f"{raw!r:.40} is not a number ({spec.unit})") from None
    return name, raw


def field_units() -> dict[str, str]:
    """field -> its unit (empty for text fields), for docs and help."""
    return {f.name: f.unit for f in FIELDS}

