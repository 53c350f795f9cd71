"""README stays true: CI runs the README's test command, command 1 is one line
on a shipped example, and every Python block runs as written."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.+?)\n```", text)[:2]


def test_ci_runs_readme_test_command():
    main_cmd, test_cmd = readme_commands()
    assert "pytest" in test_cmd
    ci_lines = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines()]
    assert test_cmd in ci_lines


def test_main_command_uses_a_shipped_example():
    main_cmd, _ = readme_commands()
    paths = [w for w in shlex.split(main_cmd) if w.startswith("examples/")]
    assert paths and all((ROOT / p).is_file() for p in paths)


def readme_python_blocks() -> list[str]:
    return re.findall(r"```python\n(.+?)\n```", (ROOT / "README.md").read_text(), re.DOTALL)


def test_main_command_is_one_line():
    main_cmd, _ = readme_commands()
    assert "\n" not in main_cmd and main_cmd.startswith("pip install")


@pytest.mark.parametrize("index", range(len(readme_python_blocks())))
def test_readme_python_block_runs(index):
    """Each block runs as written in a fresh interpreter from the repository
    root: nothing imported beforehand but what the block imports."""
    block = readme_python_blocks()[index]
    res = subprocess.run([sys.executable, "-c", block], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
