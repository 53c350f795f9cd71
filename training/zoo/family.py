"""Plain-data description of a model family: its parameters and its hooks.

A family module (``resnet.py``, ``nb201.py``, ...) defines one :class:`Family`
named ``FAMILY``; :mod:`training.zoo.registry` collects them. A family says

- which parameters it takes (:class:`Param`: type, default, allowed values),
- how to build a ``torch.nn.Module`` from normalized parameters,
- how to draw random parameters from a ``random.Random``,
- the names, shapes and dtypes of the model's inputs and outputs.

Parameters are always stored *normalized*: every declared parameter present,
defaults filled, values coerced to their canonical type. Two spellings of one
architecture therefore give one canonical JSON and one architecture id.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from training.zoo.errors import SpecError

#: Dimension name of the dynamic batch axis on every input and output.
BATCH_DIM = "batch"


def _fmt_float(value: float) -> str:
    """Shortest text that reads back as the same float (``1.0`` -> ``"1.0"``)."""
    return repr(float(value))


@dataclass(frozen=True)
class Param:
    """One parameter of a family.

    ``kind`` is ``"int"``, ``"float"``, ``"str"`` or ``"custom"``. Numeric
    parameters may give ``choices`` or an inclusive ``lo``..``hi`` range and a
    ``multiple_of``. Floats are rounded to 6 significant digits so that
    ``0.1 + 0.2`` and ``0.3`` name the same architecture. ``custom`` parameters
    supply ``coerce`` (text or JSON value -> canonical value, raising
    :class:`SpecError`) and ``fmt`` (canonical value -> spec text).
    ``in_spec`` says whether :func:`~training.zoo.spec.to_spec` writes the
    parameter when it equals its default (major parameters are always written).
    """

    name: str
    kind: str
    default: Any
    doc: str
    choices: tuple | None = None
    lo: float | None = None
    hi: float | None = None
    multiple_of: int | None = None
    in_spec: bool = True
    coerce_fn: Callable[[Any], Any] | None = None
    fmt_fn: Callable[[Any], str] | None = None

    def allowed(self) -> str:
        """Human-readable description of the allowed values."""
        if self.choices is not None:
            return "one of " + ", ".join(str(c) for c in self.choices)
        parts = []
        if self.lo is not None or self.hi is not None:
            parts.append(f"{self.kind} in [{self.lo}, {self.hi}]")
        else:
            parts.append(self.kind)
        if self.multiple_of:
            parts.append(f"multiple of {self.multiple_of}")
        return ", ".join(parts)

    def coerce(self, value: Any, family: str) -> Any:
        """Validate ``value`` (spec text or JSON value); return the canonical value."""
        where = f"parameter '{self.name}' of family '{family}'"
        if self.kind == "custom":
            assert self.coerce_fn is not None
            return self.coerce_fn(value)
        try:
            if self.kind == "int":
                if isinstance(value, bool):
                    raise ValueError
                if isinstance(value, float):
                    if not value.is_integer():
                        raise ValueError
                    value = int(value)
                out: Any = int(value) if isinstance(value, int) else int(str(value).strip(), 10)
            elif self.kind == "float":
                if isinstance(value, bool):
                    raise ValueError
                out = float(value)
                if not math.isfinite(out):
                    raise ValueError
                out = float(f"{out:.6g}")
            else:
                out = str(value).strip()
        except (TypeError, ValueError):
            raise SpecError(f"bad value {value!r} for {where}: expected {self.allowed()}") from None
        if self.choices is not None and out not in self.choices:
            raise SpecError(f"bad value {value!r} for {where}: expected {self.allowed()}")
        if (self.lo is not None and out < self.lo) or (self.hi is not None and out > self.hi):
            raise SpecError(f"bad value {value!r} for {where}: expected {self.allowed()}")
        if self.multiple_of and out % self.multiple_of:
            raise SpecError(f"bad value {value!r} for {where}: expected {self.allowed()}")
        return out

    def fmt(self, value: Any) -> str:
        """Spec text for a canonical value."""
        if self.fmt_fn is not None:
            return self.fmt_fn(value)
        if self.kind == "float":
            return _fmt_float(value)
        return str(value)


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype of one model input or output.

    ``shape`` holds ints, or the string ``"batch"`` for a dynamic batch axis.
    ``dtype`` is a numpy dtype name (``"float32"``, ``"int64"``). For integer
    inputs (token ids) ``high`` is the exclusive upper bound of valid values.
    """

    name: str
    shape: tuple
    dtype: str
    high: int | None = None


@dataclass(frozen=True)
class Family:
    """A model family: parameters plus build/sample/io hooks (see module doc).

    - ``build(params) -> torch.nn.Module`` (params normalized),
    - ``sample(rng) -> dict`` of raw parameters (normalized afterwards),
    - ``io(params, batch) -> (inputs, outputs)`` lists of :class:`TensorSpec`,
      ``batch`` an int or ``"batch"``,
    - ``check(params) -> dict`` optional cross-parameter validation that may
      also canonicalize (it receives and returns normalized params),
    - ``bare_param``: optional name of the parameter that a spec token
      without ``=`` sets, and that :func:`to_spec` writes bare (the
      NAS-Bench-201 cell string),
    - ``presets``: optional name -> {param: value} shorthands accepted by the
      pseudo-parameter ``variant=`` (expanded, never stored).
    """

    name: str
    doc: str
    params: tuple[Param, ...]
    build: Callable[[dict], Any]
    sample: Callable[[random.Random], dict]
    io: Callable[[dict, Any], tuple[list[TensorSpec], list[TensorSpec]]]
    check: Callable[[dict], dict] | None = None
    bare_param: str | None = None
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: True for published model definitions (timm, transformers): they are
    #: built on the CPU with their own initialisation under a seeded torch RNG,
    #: because their buffers (position ids, relative-position indices) hold
    #: structure that :func:`training.zoo.export.deterministic_init` would destroy.
    native_init: bool = False
    #: ``group(params) -> str``: the architecture family a config belongs to
    #: for family-held-out splits (the published families: ``resnet``,
    #: ``convnext``, ``bert``, ...); None -> the family name itself.
    group: Callable[[dict], str] | None = None

    def group_of(self, params: dict) -> str:
        """The architecture family of ``params`` (see :attr:`group`)."""
        return self.group(params) if self.group is not None else self.name

    def param(self, name: str) -> Param:
        """The parameter called ``name``; :class:`SpecError` listing valid names otherwise."""
        for p in self.params:
            if p.name == name:
                return p
        extra = ", variant" if self.presets else ""
        raise SpecError(
            f"unknown parameter '{name}' for family '{self.name}'; valid parameters: "
            + ", ".join(p.name for p in self.params) + extra
        )

    def normalize(self, raw: Mapping[str, Any]) -> dict:
        """Validate ``raw`` and return the full canonical parameter dict."""
        raw = dict(raw)
        out: dict[str, Any] = {}
        if "variant" in raw and self.presets:
            name = str(raw.pop("variant")).strip()
            if name not in self.presets:
                raise SpecError(
                    f"unknown variant '{name}' for family '{self.name}'; valid variants: "
                    + ", ".join(self.presets)
                )
            for k, v in self.presets[name].items():
                raw.setdefault(k, v)
        for key in raw:
            self.param(key)  # raises on unknown names
        for p in self.params:
            out[p.name] = p.coerce(raw.get(p.name, p.default), self.name)
        if self.check is not None:
            out = self.check(out)
        return out


# --- helpers shared by the family modules ---------------------------------


def make_divisible(value: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round a channel count to a multiple of ``divisor`` (never below 90 %)."""
    min_value = divisor if min_value is None else min_value
    out = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if out < 0.9 * value:
        out += divisor
    return out


def res_param(default: int = 224, lo: int = 32, hi: int = 1024, multiple_of: int | None = None) -> Param:
    """The input resolution parameter (pixels, square input)."""
    return Param("res", "int", default, "input height = width in pixels", lo=lo, hi=hi,
                 multiple_of=multiple_of)


def width_param(default: float = 1.0, lo: float = 0.125, hi: float = 4.0) -> Param:
    """The channel-width multiplier parameter."""
    return Param("width", "float", default, "channel width multiplier", lo=lo, hi=hi)


def classes_param(default: int = 1000) -> Param:
    """The number of output classes (minor: written in specs only when not default)."""
    return Param("classes", "int", default, "number of output classes", lo=1, hi=100000,
                 in_spec=False)


def image_io(channels: int = 3):
    """``io`` hook for image classifiers: input (B,3,res,res) float32 -> logits (B,classes)."""

    def io(params: dict, batch: Any) -> tuple[list[TensorSpec], list[TensorSpec]]:
        res = params["res"]
        return (
            [TensorSpec("input", (batch, channels, res, res), "float32")],
            [TensorSpec("logits", (batch, params["classes"]), "float32")],
        )

    return io


def pick(rng: random.Random, values: Sequence[Any]) -> Any:
    """``rng.choice`` spelled once, so every sampler draws the same way."""
    return values[rng.randrange(len(values))]
