"""``perfseer-rt``: a thin command line over the library calls.

Every user error (:class:`perfseer_rt.errors.PerfSeerError`) becomes one line
on stderr and exit code 2; nothing is written to an output file unless the
command succeeded.
"""

from __future__ import annotations

import json
import sys

import click

from perfseer_rt.errors import PerfSeerError


class _Group(click.Group):
    """A click group that turns PerfSeerError into one line and exit 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except PerfSeerError as exc:
            click.echo(f"perfseer-rt: error: {exc}", err=True)
            ctx.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="perfseer-rt")
def main() -> None:
    """Predict how an ONNX model will perform before it runs."""


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
        shapes[name] = shape
    return shapes


def parse_dims(values: tuple[str, ...]) -> dict[str, int]:
    """Parse ``NAME=VALUE`` options (symbolic input dims) into a mapping."""
    dims: dict[str, int] = {}
    for value in values:
        name, sep, num = value.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            dims[name.strip()] = int(num)
            if dims[name.strip()] < 0:
                raise ValueError
        except ValueError:
            raise PerfSeerError(f"--dim {value!r}: expected NAME=VALUE with a non-negative "
                                "integer, e.g. --dim seq=128") from None
    return dims


def emit_json(obj) -> None:
    """Print one JSON document to stdout."""
    click.echo(json.dumps(obj, indent=None, separators=(",", ":")))


_model_arg = click.argument("model", type=click.Path(dir_okay=False, path_type=str))
_batch_opt = click.option("--batch", type=click.IntRange(min=1), default=None,
                          help="Batch size; resolves a dynamic first input dim.")
_input_opt = click.option("--input", "inputs", multiple=True, metavar="NAME:D1xD2x...",
                          help="Shape of one graph input (repeatable).")
_dim_opt = click.option("--dim", "dims", multiple=True, metavar="NAME=VALUE",
                        help="Size of every input dim with this symbolic name (repeatable).")


@main.command()
@_model_arg
@_batch_opt
@_input_opt
@_dim_opt
@click.option("--json", "as_json", is_flag=True, help="Print the PerfGraph as JSON.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the arrays to this .npz file (atomically).")
def extract(model, batch, inputs, dims, as_json, output):
    """Extract the PerfGraph of MODEL."""
    from perfseer_rt.graph.extract import extract as do_extract

    graph = do_extract(model, batch=batch, input_shapes=parse_input_shapes(inputs),
                       dims=parse_dims(dims))
    _warn_unknown(graph)
    if output:
        graph.save_npz(output)
    if as_json or not output:
        emit_json(graph.to_dict())


@main.command()
@_model_arg
@_batch_opt
@_input_opt
@_dim_opt
@click.option("--top", type=click.IntRange(min=1), default=5, show_default=True,
              help="How many of the heaviest layers to list.")
def inspect(model, batch, inputs, dims, top):
    """Print a short human summary of MODEL."""
    from perfseer_rt.graph.extract import extract as do_extract
    from perfseer_rt.graph.summary import summarize

    graph = do_extract(model, batch=batch, input_shapes=parse_input_shapes(inputs),
                       dims=parse_dims(dims))
    _warn_unknown(graph)
    click.echo(summarize(graph, top=top))


def _warn_unknown(graph) -> None:
    for w in graph.warnings:
        click.echo(f"perfseer-rt: warning: {w}", err=True)
    if graph.unknown_ops:
        click.echo("perfseer-rt: warning: ops without a cost rule got the generic cost: "
                   + ", ".join(sorted(set(graph.unknown_ops))), err=True)


def _register_stage_commands() -> None:
    """Commands that live in their stage's package (profile/, predict/)."""
    from perfseer_rt.calibrate.command import calibrate
    from perfseer_rt.predict.command import check, devices, fit, predict
    from perfseer_rt.profile.command import profile
    from perfseer_rt.serve.command import serve

    for cmd in (predict, devices, check, fit, profile, serve, calibrate):
        main.add_command(cmd)


_register_stage_commands()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
