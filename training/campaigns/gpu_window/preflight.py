"""Before the device call, here: does the working tree fit the transfer, and
what exactly to run.

The device tool sends the session's checkout: tracked files and untracked
files git does not ignore, at most 64 MiB in all. This prints that size (and
the largest folders when it is over), the commit to stamp the records with,
and the ``run`` call to make. Exit status 0 when the tree fits, 1 when not.

The window needs only the code (``training/``, ``perfseer_rt/``,
``pyproject.toml``). ``--slim`` makes the data and the shipped predictors
stay behind without touching a file on disk: they leave git's index
(``git rm -r --cached``) and enter ``.git/info/exclude``, so they are
untracked and ignored, which the device tool does not send. ``--restore``
undoes both (the index back to HEAD, the exclude lines removed); run it
right after the call.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
LIMIT_MIB = 64.0
#: keep this much below the limit (the tool counts what it sends, we count file sizes)
MARGIN_MIB = 2.0


def travelling_files(repo: Path = REPO) -> list[tuple[str, int]]:
    """(path, bytes) of every file the device call would send from ``repo``."""
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, check=True).stdout
    files = []
    for name in out.decode().split("\0"):
        p = repo / name
        if name and p.is_file():
            files.append((name, p.stat().st_size))
    return files


#: what ``--slim`` leaves behind (the window reads none of it)
SLIM_PATHS = ("data", "exported_models")
#: the comment line before the exclude lines ``--slim`` adds (git reads no
#: comment after a pattern), for ``--restore``
MARK = "# gpu-window --slim: the next lines are removed by --restore"


def slim(repo: Path = REPO) -> None:
    """Leave :data:`SLIM_PATHS` out of what travels (module doc)."""
    subprocess.run(["git", "-C", str(repo), "rm", "-r", "-q", "--cached", "--ignore-unmatch", *SLIM_PATHS],
                   check=True)
    exclude = repo / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    lines = _without_slim(exclude.read_text() if exclude.is_file() else "")
    lines += [MARK] + [f"/{p}/" for p in SLIM_PATHS]
    exclude.write_text("\n".join(lines) + "\n")


def _without_slim(text: str) -> list[str]:
    """The exclude file's lines without the block :func:`slim` added."""
    lines = text.splitlines()
    if MARK not in lines:
        return lines
    i = lines.index(MARK)
    return lines[:i] + lines[i + 1 + len(SLIM_PATHS):]


def restore(repo: Path = REPO) -> None:
    """Undo :func:`slim`: the index back to HEAD for :data:`SLIM_PATHS`, the
    exclude lines removed."""
    exclude = repo / ".git" / "info" / "exclude"
    if exclude.is_file():
        kept = _without_slim(exclude.read_text())
        exclude.write_text("\n".join(kept) + ("\n" if kept else ""))
    subprocess.run(["git", "-C", str(repo), "reset", "-q", "HEAD", "--", *SLIM_PATHS], check=True)


def command(commit: str) -> str:
    return f"GPU_WINDOW_COMMIT={commit} bash training/campaigns/gpu_window.sh"


def main(repo: Path = REPO) -> int:
    files = travelling_files(repo)
    total = sum(b for _, b in files) / 2**20
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no", "--",
                            ".", *[f":!{p}" for p in SLIM_PATHS]],
                           capture_output=True, text=True).stdout.strip()
    print(f"the device call sends {len(files)} files, {total:.1f} MiB (limit {LIMIT_MIB:.0f} MiB)")
    fits = total <= LIMIT_MIB - MARGIN_MIB
    if not fits:
        by_dir: Counter[str] = Counter()
        for name, b in files:
            parts = name.split("/")
            by_dir["/".join(parts[:2]) if len(parts) > 2 else parts[0]] += b
        print("too large: the call would be refused. Largest folders:")
        for d, b in by_dir.most_common(8):
            print(f"  {b / 2**20:7.1f} MiB  {d}")
        print("the window needs only training/ and perfseer_rt/: `python -m training.campaigns.gpu_window "
              "preflight --slim` leaves data/ and exported_models/ behind (`--restore` after the call)")
    if dirty:
        print("note: tracked files have uncommitted changes; the records will name HEAD plus their code hash")
    print("run tool call: command=" + repr(command(head or "unknown")) + ", timeout_s=600, carry=[]")
    return 0 if fits else 1
