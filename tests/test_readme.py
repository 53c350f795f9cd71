"""README's set-up commands stay true: CI runs the README's test command."""

import re
import shlex
from pathlib import Path

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
