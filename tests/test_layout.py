"""tests/README.md maps every test file to the package it tests (the
documented equivalent of a mirrored tree); a new test file must be listed."""

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_every_test_file_is_mapped_to_its_package():
    table = (HERE / "README.md").read_text()
    listed = set(re.findall(r"`(test_\w+\.py)`", table))
    present = {p.name for p in HERE.glob("test_*.py")}
    assert present - listed == set(), "add these to tests/README.md"
    assert listed - present == set(), "tests/README.md lists files that are gone"


#: Text the project writes (code, docs, reports, configuration).
TEXT_SUFFIXES = {".py", ".md", ".toml", ".sh", ".txt", ".yml", ".yaml", ".cfg", ".ini"}
#: Folders that hold no text of the project's own (environments, caches, VCS).
NOT_OURS = {".git", ".venv", ".ci-venv", "venv", "node_modules", "__pycache__", ".mypy_cache",
            ".ruff_cache", ".pytest_cache", ".cache", "build", "dist"}


def test_no_numbered_work_periods_anywhere():
    """The project speaks of itself by dates, commits and machines: no text
    or file name of it says "session N" (issue 45's check, ``git grep -i -E
    "session ?[0-9]"``; an onnxruntime session's figures are worded
    around it)."""
    pattern = re.compile(r"session ?[0-9]", re.I)
    root = HERE.parent
    found = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if any(part in NOT_OURS or part.endswith(".egg-info") for part in rel.parts):
            continue
        if pattern.search(path.name):
            found.append(str(rel))
        elif path.is_file() and path.suffix in TEXT_SUFFIXES:
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if pattern.search(line):
                    found.append(f"{rel}:{n}: {line.strip()[:80]}")
    assert found == []
