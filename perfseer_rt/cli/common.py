"""What every ``perfseer-rt`` command shares: option parsers, JSON output,
the options spelled the same everywhere."""

from __future__ import annotations

import json
from typing import Any

import click

from perfseer_rt.errors import PerfSeerError


def parse_input_shapes(values: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """Parse ``NAME:D1xD2x...`` options into a name -> shape mapping."""
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
            raise PerfSeerError(
                f"--input {value!r}: expected NAME:D1xD2x... with positive integer "
                "dims, e.g. --input pixel_values:1x3x224x224") from None
        if shapes.get(name, shape) != shape:
            raise PerfSeerError(f"--input {name} given twice with different shapes "
                                f"({'x'.join(map(str, shapes[name]))} and {dims})")
        shapes[name] = shape
    return shapes


def parse_dims(values: tuple[str, ...]) -> dict[str, int]:
    """Parse ``NAME=VALUE`` options (symbolic input dims) into a mapping."""
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
            raise PerfSeerError(f"--dim {value!r}: expected NAME=VALUE with a non-negative "
                                "integer, e.g. --dim seq=128") from None
        if dims.get(name, size) != size:
            raise PerfSeerError(f"--dim {name} given twice with different values "
                                f"({dims[name]} and {size})")
        dims[name] = size
    return dims


def emit_json(obj: Any) -> None:
    """Print one JSON document to stdout."""
    click.echo(json.dumps(obj, indent=None, separators=(",", ":")))


input_opt = click.option("--input", "inputs", multiple=True, metavar="NAME:D1xD2x...",
                         help="Shape of one graph input (repeatable).")
dim_opt = click.option("--dim", "dims", multiple=True, metavar="NAME=VALUE",
                       help="Size of every input dim with this symbolic name (repeatable); "
                            "dims named by an expression of these take its value; a switch "
                            "input of this name (a merged decoder's use_cache_branch) takes "
                            "the value.")
