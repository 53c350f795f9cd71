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

import perfseer_rt.profile as profile_package
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


#: what a CPU prediction never needs: the GPU predictor and spec sheets, the
#: profiler beyond reading this machine's CPU and building a session, the
#: service, calibration's and profiling's commands, a progress bar for one model
NOT_FOR_CPU_PREDICT = ("perfseer_rt.serve", "perfseer_rt.cli.serve", "perfseer_rt.cli.calibrate",
                       "perfseer_rt.cli.profile", "perfseer_rt.gpu.predictor", "perfseer_rt.gpu.entries",
                       "perfseer_rt.gpu.spec_sheet", "perfseer_rt.gpu.memory", "perfseer_rt.gpu.step",
                       "perfseer_rt.profile.api", "perfseer_rt.profile.worker", "perfseer_rt.profile.timing",
                       "perfseer_rt.profile.cuda", "tqdm", "multiprocessing")


def test_predicting_on_a_cpu_loads_its_predictor_only():
    loaded = _modules_after(["predict", MODEL])
    assert {"perfseer_rt.predict.api", "perfseer_rt.predict.seernet_impl", "perfseer_rt.profile.env",
            "perfseer_rt.profile.session", "onnxruntime"} <= set(loaded)
    assert [m for m in loaded if m.startswith(NOT_FOR_CPU_PREDICT)] == []


def test_predicting_on_a_gpu_loads_the_gpu_predictor():
    """The other side of the lazy import: a GPU device (from its spec sheet)
    registers and runs the GPU implementation, and no measuring code."""
    loaded = _modules_after(["predict", MODEL, "--device", "h100-sxm"])
    assert {"perfseer_rt.gpu.predictor", "perfseer_rt.gpu.entries"} <= set(loaded)
    assert [m for m in loaded if m.startswith(("perfseer_rt.profile.worker", "perfseer_rt.serve", "tqdm"))] == []


def test_the_profiler_package_loads_its_names_on_first_use():
    code = ("import sys, perfseer_rt.profile as p\n"
            "before = sorted(m for m in sys.modules if m.startswith('perfseer_rt.profile.'))\n"
            "from perfseer_rt.profile import ProfileWorker, environment, hostmem\n"
            "from perfseer_rt.profile.worker import ProfileWorker as W\n"
            "assert ProfileWorker is W and callable(environment) and hostmem.__name__.endswith('hostmem')\n"
            "assert all(callable(getattr(p, n)) or getattr(p, n) is not None for n in p.__all__)\n"
            "print(before)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]"]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        profile_package.nope  # noqa: B018


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
