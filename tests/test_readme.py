"""README stays true: CI runs the README's test command, command 1 is one line
on a shipped example, every Python block runs as written, and every shell
line of the README and docs/ names a real command (with real subcommands and
options where the command is ours)."""

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from perfseer_rt.cli import main as cli_main

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

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


#: Tools the documents show that are not ours (checked by name only).
EXTERNAL = {"pip", "curl", "docker"}


def shell_lines() -> list[tuple[str, str]]:
    """(document, line) for every command line of a ```bash block in the
    README and docs/ (comments dropped, ``&&`` chains split)."""
    out = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```bash\n(.+?)\n```", doc.read_text(), re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                while words:
                    cut = words.index("&&") if "&&" in words else len(words)
                    out.append((doc.relative_to(ROOT).as_posix(), shlex.join(words[:cut])))
                    words = words[cut + 1:]
    return out


def _options(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}


def check_ours(words: list[str]) -> None:
    """The subcommand path exists and every --option belongs to it."""
    cmd: click.Command = cli_main
    path = ["perfseer-rt"]
    for w in words[1:]:
        if w.startswith("-") or not isinstance(cmd, click.Group):
            break
        sub = cmd.get_command(click.Context(cmd), w)
        if sub is None:
            break
        cmd, path = sub, path + [w]
    assert not isinstance(cmd, click.Group) or path == ["perfseer-rt", "devices"], \
        f"{' '.join(words)}: no subcommand"
    known = _options(cmd)
    for w in words[1:]:
        if w in (">", "|"):
            break
        flag = w.strip("[](").split("=")[0]
        if flag.startswith("-") and not re.fullmatch(r"-?\d+(\.\d+)?", flag):
            assert flag in known, f"{' '.join(path)} has no option {flag}"


def check_command(words: list[str]) -> None:
    """``words`` start with our entry point, ``python -m`` a module of ours or
    a library, ``python`` / a repository script (which may wrap a command),
    or a known tool."""
    first = words[0]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    if first in scripts:
        check_ours(words)
    elif first == "python":
        if words[1] == "-m":
            assert importlib.util.find_spec(words[2]) is not None, f"no module {words[2]}"
        else:
            assert (ROOT / words[1]).is_file(), f"no script {words[1]}"
    elif "/" in first:
        assert (ROOT / first).is_file(), f"no script {first}"
        if len(words) > 1 and not words[1].startswith("-"):
            check_command(words[1:])  # a wrapper such as training/dataset/quiet_core.sh
    else:
        assert first in EXTERNAL, f"{first!r} is neither ours nor a known tool"


@pytest.mark.parametrize("doc,line", shell_lines())
def test_shell_line_names_a_real_command(doc, line):
    check_command(shlex.split(line))


@pytest.mark.parametrize("line", [
    "perfseer-rt predict m.onnx --no-such-option 1", "perfseer-rt no-such-command m.onnx",
    "perfseer-rt devices add-gpu x --spec f.json --precision fp32", "python -m no_such_module_here",
    "training/no_such_script.sh python -m pytest", "make all"])
def test_shell_line_check_refuses(line):
    """The check above can fail: a wrong option, subcommand, module, script
    or tool is caught."""
    with pytest.raises(AssertionError):
        check_command(shlex.split(line))
