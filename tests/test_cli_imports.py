"""Each CLI subcommand imports only what it uses: ``perfseer-rt extract``,
``inspect`` and ``--help`` load no predictor, GPU, profiler, calibration or
service code (nor onnxruntime); the lazily loaded subcommands keep their
help lines (``perfseer_rt.cli.COMMANDS``)."""

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from perfseer_rt.cli import COMMANDS, load_command, main

ROOT = Path(__file__).resolve().parents[1]
MODEL = str(ROOT / "examples" / "resnet18.onnx")
#: what extraction never needs
HEAVY = ("perfseer_rt.predict", "perfseer_rt.gpu", "perfseer_rt.profile", "perfseer_rt.calibrate",
         "perfseer_rt.serve", "perfseer_rt._exported_models", "onnxruntime", "tqdm")


def _modules_after(args: list[str]) -> list[str]:
    """Modules loaded by a fresh interpreter that runs ``perfseer-rt ARGS``."""
    code = ("import contextlib, io, json, sys\n"
            "from perfseer_rt.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n"
            f"        main({args!r})\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.splitlines()[-1])


@pytest.mark.parametrize("args", [["extract", MODEL], ["inspect", MODEL], ["--help"], ["extract", "--help"]],
                         ids=["extract", "inspect", "help", "extract-help"])
def test_extracting_loads_no_predictor(args):
    loaded = _modules_after(args)
    assert "perfseer_rt.cli" in loaded
    assert [m for m in loaded if m.startswith(HEAVY)] == []
    if args[0] != "--help":
        assert "perfseer_rt.cli.graph" in loaded and "perfseer_rt.cli.predict" not in loaded


def test_predicting_loads_the_predictor_and_no_service():
    loaded = _modules_after(["predict", MODEL])
    assert "perfseer_rt.predict.api" in loaded and "onnxruntime" in loaded
    assert [m for m in loaded if m.startswith(("perfseer_rt.serve", "perfseer_rt.cli.serve",
                                               "perfseer_rt.cli.calibrate", "perfseer_rt.cli.profile"))] == []


def test_help_lines_are_the_commands_own():
    ctx = click.Context(main)
    assert main.list_commands(ctx) == sorted(COMMANDS)
    for name, (_, _, line) in COMMANDS.items():
        cmd = load_command(name)
        assert cmd.name == name and cmd.get_short_help_str(10**6) == line, name
    devices = load_command("devices")
    assert isinstance(devices, click.Group) and {"add-gpu", "remove", "gpu-specs"} <= set(devices.commands)
    assert main.get_command(ctx, "nope") is None


def test_the_package_loads_the_predictor_on_first_use():
    code = ("import sys, perfseer_rt\n"
            "before = 'perfseer_rt.predict' in sys.modules\n"
            "f = perfseer_rt.predict.predict\n"
            "print(before, callable(f), 'perfseer_rt.predict.api' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True", "True"]
