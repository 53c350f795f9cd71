"""``perfseer-rt``: a thin command line over the library calls.

This package owns all of the click code: one module per stage
(``graph``, ``predict``, ``profile``, ``calibrate``, ``serve``); the runtime
packages know nothing of click. Every user error
(:class:`perfseer_rt.errors.PerfSeerError`) becomes one line on stderr and
exit code 2; nothing is written to an output file unless the command
succeeded.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from perfseer_rt.cli.common import emit_json, parse_dims, parse_input_shapes
from perfseer_rt.errors import PerfSeerError

__all__ = ["COMMANDS", "main", "emit_json", "parse_dims", "parse_input_shapes"]

#: Each subcommand: the module that defines it, its attribute there, and the
#: line ``perfseer-rt --help`` shows for it (the first sentence of its help;
#: tests/test_cli_imports.py keeps the two equal). A subcommand's module is
#: imported only when that subcommand runs: ``perfseer-rt extract`` and
#: ``--help`` load no predictor, GPU, profiler or service code.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "calibrate": ("perfseer_rt.cli.calibrate", "calibrate",
                  "Profile bundled reference models here; write a calibrated device entry."),
    "check": ("perfseer_rt.cli.predict", "check",
              "Does MODEL meet the budget on a device? Exit 0 yes, 1 no, 2 bad input."),
    "devices": ("perfseer_rt.cli.predict", "devices",
                "List the predictors (shipped and calibrated) with their test accuracy; the "
                "subcommands add and remove your own GPUs (from their spec sheets)."),
    "extract": ("perfseer_rt.cli.graph", "extract", "Extract the PerfGraph of MODEL."),
    "fit": ("perfseer_rt.cli.predict", "fit",
            "The largest batch (or --dim value) of MODEL within budget on a device "
            "(--max-memory-mb, or the usable memory of --mig-profile on a MIG GPU)."),
    "inspect": ("perfseer_rt.cli.graph", "inspect",
                "Print a short human summary of MODEL (--json: a per-layer table)."),
    "predict": ("perfseer_rt.cli.predict", "predict",
                "Predict the metrics of ONNX MODELS (files or folders of .onnx) on a device."),
    "profile": ("perfseer_rt.cli.profile", "profile",
                "Measure latency, peak memory (and on CUDA utilization and energy) of MODEL."),
    "serve": ("perfseer_rt.cli.serve", "serve",
              "Serve predictions over HTTP/JSON (OpenAPI page at /docs)."),
}


def load_command(name: str) -> click.Command:
    """Subcommand ``name`` of :data:`COMMANDS`, its module imported now
    (``devices`` with its own subcommands: add-gpu, remove, gpu-specs)."""
    module, attr, _ = COMMANDS[name]
    cmd: click.Command = getattr(importlib.import_module(module), attr)
    if name == "devices" and isinstance(cmd, click.Group) and not cmd.commands:
        subcommands = importlib.import_module("perfseer_rt.cli.devices").SUBCOMMANDS
        for sub in subcommands:
            cmd.add_command(sub)
    return cmd


class _Group(click.Group):
    """The ``perfseer-rt`` group: subcommands loaded when they run
    (:data:`COMMANDS`), and PerfSeerError turned into one line and exit 2."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load_command(cmd_name) if cmd_name in COMMANDS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands' one-line helps from :data:`COMMANDS`, laid out as
        click lays out those of loaded commands."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = [(n, click.Command(n, help=COMMANDS[n][2]).get_short_help_str(limit)) for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PerfSeerError as exc:
            click.echo(f"perfseer-rt: error: {exc}", err=True)
            ctx.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="perfseer-rt")
def main() -> None:
    """Predict how an ONNX model will perform before it runs."""
