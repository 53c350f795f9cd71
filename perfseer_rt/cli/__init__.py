"""``perfseer-rt``: a thin command line over the library calls.

This package owns all of the click code: one module per stage
(``graph``, ``predict``, ``profile``, ``calibrate``, ``serve``); the runtime
packages know nothing of click. Every user error
(:class:`perfseer_rt.errors.PerfSeerError`) becomes one line on stderr and
exit code 2; nothing is written to an output file unless the command
succeeded.
"""

from __future__ import annotations

from typing import Any

import click

from perfseer_rt.cli.calibrate import calibrate
from perfseer_rt.cli.common import emit_json, parse_dims, parse_input_shapes
from perfseer_rt.cli.devices import SUBCOMMANDS as DEVICE_SUBCOMMANDS
from perfseer_rt.cli.graph import extract, inspect
from perfseer_rt.cli.predict import check, devices, fit, predict
from perfseer_rt.cli.profile import profile
from perfseer_rt.cli.serve import serve
from perfseer_rt.errors import PerfSeerError

__all__ = ["main", "emit_json", "parse_dims", "parse_input_shapes"]


class _Group(click.Group):
    """A click group that turns PerfSeerError into one line and exit 2."""

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


for _cmd in (extract, inspect, predict, devices, check, fit, profile, serve, calibrate):
    main.add_command(_cmd)
for _cmd in DEVICE_SUBCOMMANDS:  # devices add-gpu / remove / gpu-specs
    devices.add_command(_cmd)
