"""``perfseer-rt extract`` and ``inspect``: the PerfGraph of one model."""

from __future__ import annotations

import os

import click

from perfseer_rt.cli.common import dim_opt, emit_json, input_opt, parse_dims, parse_input_shapes
from perfseer_rt.errors import OutputError
from perfseer_rt.graph.extract import extract as do_extract
from perfseer_rt.graph.perfgraph import PerfGraph
from perfseer_rt.graph.summary import layer_table, summarize

_model_arg = click.argument("model", type=click.Path(dir_okay=False, path_type=str))
_batch_opt = click.option("--batch", type=click.IntRange(min=1), default=None,
                          help="Batch size; resolves a dynamic first input dim.")


@click.command()
@_model_arg
@_batch_opt
@input_opt
@dim_opt
@click.option("--json", "as_json", is_flag=True, help="Print the PerfGraph as JSON.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the arrays to this .npz file (atomically).")
def extract(model: str, batch: int | None, inputs: tuple[str, ...], dims: tuple[str, ...],
            as_json: bool, output: str | None) -> None:
    """Extract the PerfGraph of MODEL."""
    if output and os.path.exists(output) and os.path.samefile(output, model):
        raise OutputError(f"-o {output}: that is the model itself; extracting would overwrite it")
    graph = do_extract(model, batch=batch, input_shapes=parse_input_shapes(inputs),
                       dims=parse_dims(dims))
    _warn_unknown(graph)
    if output:
        graph.save_npz(output)
    if as_json or not output:
        emit_json(graph.to_dict())


@click.command()
@_model_arg
@_batch_opt
@input_opt
@dim_opt
@click.option("--top", type=click.IntRange(min=1), default=5, show_default=True,
              help="How many of the heaviest layers to list.")
@click.option("--json", "as_json", is_flag=True, help="Print totals and every layer (FLOPs, "
              "bytes moved, weights, shares, output shapes) as JSON instead.")
def inspect(model: str, batch: int | None, inputs: tuple[str, ...], dims: tuple[str, ...],
            top: int, as_json: bool) -> None:
    """Print a short human summary of MODEL (--json: a per-layer table)."""
    graph = do_extract(model, batch=batch, input_shapes=parse_input_shapes(inputs),
                       dims=parse_dims(dims))
    _warn_unknown(graph)
    if as_json:
        emit_json({"model": model, **layer_table(graph)})
    else:
        click.echo(summarize(graph, top=top))


def _warn_unknown(graph: PerfGraph) -> None:
    for w in graph.warnings:
        click.echo(f"perfseer-rt: warning: {w}", err=True)
    if graph.unknown_ops:
        click.echo("perfseer-rt: warning: ops without a cost rule got the generic cost: "
                   + ", ".join(sorted(set(graph.unknown_ops))), err=True)
