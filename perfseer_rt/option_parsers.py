"""Parsers of option values given as text (a flag's value, a query
parameter, a form field): each takes the option's name as the user wrote it
(``--dim`` on the command line, ``dim`` over HTTP) and the texts given, one
per use, and returns the value or raises an
:class:`~perfseer_rt.errors.OptionError` naming the option, the value and
what was expected. Light on purpose: the CLI's ``extract`` uses them without
loading any predictor code (:mod:`perfseer_rt.predict.options` is the table
of options built on them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from perfseer_rt.errors import OptionError


def _one(flag: str, values: Sequence[str]) -> str:
    if len(set(values)) > 1:
        raise OptionError(f"{flag} given {len(values)} times with different values "
                          f"({', '.join(repr(v) for v in values)}); give it once")
    return values[0]


def parse_batches(flag: str, values: Sequence[str]) -> list[int | None]:
    """``"1,8,32"`` -> ``[1, 8, 32]`` (duplicates dropped, order kept)."""
    text = _one(flag, values)
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
        if not out or any(v < 1 for v in out):
            raise ValueError
    except ValueError:
        raise OptionError(f"{flag} {text!r}: expected positive integers separated by "
                          f"commas, e.g. {flag} 1,8,32") from None
    return list(dict.fromkeys(out))


def parse_batch(flag: str, values: Sequence[str]) -> int:
    text = _one(flag, values)
    try:
        value = int(text)
        if value < 1:
            raise ValueError
    except ValueError:
        raise OptionError(f"{flag} {text!r}: expected one positive integer, e.g. {flag} 8") from None
    return value


def parse_input_shapes(flag: str, values: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """``NAME:D1xD2x...`` values -> a name -> shape mapping."""
    shapes: dict[str, tuple[int, ...]] = {}
    for value in values:
        name, sep, dims = value.rpartition(":")
        try:
            if not sep or not name:
                raise ValueError
            shape = tuple(int(d) for d in dims.lower().split("x"))
            if any(d <= 0 for d in shape):
                raise ValueError
        except ValueError:
            raise OptionError(
                f"{flag} {value!r}: expected NAME:D1xD2x... with positive integer "
                f"dims, e.g. {flag} pixel_values:1x3x224x224") from None
        if shapes.get(name, shape) != shape:
            raise OptionError(f"{flag} {name} given twice with different shapes "
                              f"({'x'.join(map(str, shapes[name]))} and {dims})")
        shapes[name] = shape
    return shapes


def parse_dims(flag: str, values: Sequence[str]) -> dict[str, int]:
    """``NAME=VALUE`` values (symbolic input dims) -> a mapping."""
    dims: dict[str, int] = {}
    for value in values:
        name, sep, num = value.partition("=")
        name = name.strip()
        try:
            if not sep or not name:
                raise ValueError
            size = int(num)
            if size < 0:
                raise ValueError
        except ValueError:
            raise OptionError(f"{flag} {value!r}: expected NAME=VALUE with a non-negative "
                              f"integer, e.g. {flag} seq=128") from None
        if dims.get(name, size) != size:
            raise OptionError(f"{flag} {name} given twice with different values "
                              f"({dims[name]} and {size})")
        dims[name] = size
    return dims


def parse_name(flag: str, values: Sequence[str]) -> str:
    text = _one(flag, values).strip()
    if not text:
        raise OptionError(f"{flag}: expected a name, got an empty value")
    return text


def parse_list(flag: str, values: Sequence[str]) -> list[str]:
    """Comma-separated names (repeatable): ``a,b`` -> ``["a", "b"]``."""
    out = [x.strip() for v in values for x in v.split(",") if x.strip()]
    if not out:
        raise OptionError(f"{flag}: expected comma-separated names, got an empty value")
    return list(dict.fromkeys(out))


def _number(text: str) -> float:
    """``text`` as a float; NaN when it is not a number (every range check fails)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def parse_limit(flag: str, values: Sequence[str]) -> float:
    """A budget: a positive, finite number."""
    text = _one(flag, values)
    value = _number(text)
    if not (math.isfinite(value) and value > 0):
        raise OptionError(f"{flag} {text!r}: expected a positive, finite number")
    return value


def parse_power(flag: str, values: Sequence[str]) -> float:
    """A power cap: watts in 1..5000."""
    text = _one(flag, values)
    value = _number(text)
    if not 1.0 <= value <= 5000.0:
        raise OptionError(f"{flag} {text!r}: expected watts between 1 and 5000")
    return value


def parse_bool(flag: str, values: Sequence[str]) -> bool:
    """``true``/``false`` (also 1/0, yes/no, on/off; any case)."""
    text = _one(flag, values).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise OptionError(f"{flag} {text!r}: expected true or false")


def choice(choices: tuple[str, ...]) -> Callable[[str, Sequence[str]], str]:
    def parse(flag: str, values: Sequence[str]) -> str:
        text = _one(flag, values)
        if text not in choices:
            raise OptionError(f"{flag} {text!r} is not one of "
                              f"{', '.join(repr(c) for c in choices)}")
        return text
    return parse
