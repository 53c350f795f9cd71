"""What every ``perfseer-rt`` command shares: option parsers, JSON output,
the shape and dim options (light: ``extract`` loads no predictor code)."""

from __future__ import annotations

import json
from typing import Any

import click

from perfseer_rt import option_parsers


def parse_input_shapes(values: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """Parse ``NAME:D1xD2x...`` options into a name -> shape mapping."""
    return option_parsers.parse_input_shapes("--input", values)


def parse_dims(values: tuple[str, ...]) -> dict[str, int]:
    """Parse ``NAME=VALUE`` options (symbolic input dims) into a mapping."""
    return option_parsers.parse_dims("--dim", values)


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
