"""Read a published repository's files from its git directory (``git show``,
no work tree needed): the one place the public-data readers run git."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """stdout of ``git --git-dir REPO ARGS...`` (raises on a git error)."""
    return subprocess.run(["git", "--git-dir", str(repo), *args], check=True, capture_output=True,
                          encoding="utf-8", errors="replace").stdout


def head_commit(repo: Path) -> str:
    """The full hash of ``repo``'s HEAD."""
    return git(repo, "rev-parse", "HEAD").strip()


def files_under(repo: Path, folder: str) -> list[str]:
    """Every file path under ``folder`` at HEAD (repository-relative)."""
    return git(repo, "ls-tree", "-r", "--name-only", "HEAD", folder).splitlines()


def show(repo: Path, path: str) -> str:
    """The text of ``path`` at HEAD."""
    return git(repo, "show", f"HEAD:{path}")
