"""CI lint: ruff over the repository and mypy (strict on ``perfseer_rt/``,
mypy's defaults on ``training/``).

The settings live in pyproject.toml (``[tool.ruff]``, ``[tool.mypy]``); this
test only runs the tools, so ``python -m pytest`` (README's one test command,
and CI's) covers them.
"""

import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _tool(module: str) -> list[str]:
    pytest.importorskip(module)  # part of the [test] extra; CI installs it
    return [sys.executable, "-m", module]


def test_ruff_is_clean():
    proc = subprocess.run(_tool("ruff") + ["check", "--no-cache", "."], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_mypy_is_clean(tmp_path):
    """mypy over ``[tool.mypy] files``: perfseer_rt/ strictly, training/ non-strict."""
    # a fresh cache: the result must not depend on an earlier run's state
    proc = subprocess.run(_tool("mypy") + ["--cache-dir", str(tmp_path / "cache")], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success" in proc.stdout


def test_mypy_checks_the_runtime_strictly():
    """Every flag of ``mypy --strict`` that can be set per module is set for
    perfseer_rt (``strict = true`` in an override would apply to every module
    mypy sees, training/ included)."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    runtime = [o for o in cfg["overrides"] if o["module"] == ["perfseer_rt", "perfseer_rt.*"]]
    assert len(runtime) == 1
    for flag in ("disallow_untyped_defs", "disallow_incomplete_defs", "disallow_untyped_calls",
                 "disallow_any_generics", "check_untyped_defs", "warn_return_any",
                 "no_implicit_reexport", "strict_equality"):
        assert runtime[0].get(flag) is True, flag
    assert not any("strict" in o for o in cfg["overrides"])
    assert "perfseer_rt" in cfg["files"]


def test_mypy_checks_training():
    """training/ is in mypy's run, and no override switches its errors off
    wholesale (single modules may be, each with a TODO naming its issue)."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert "training" in cfg["files"]
    for o in cfg["overrides"]:
        if o.get("ignore_errors"):
            assert not {"training", "training.*"} & set(o["module"]), o["module"]
