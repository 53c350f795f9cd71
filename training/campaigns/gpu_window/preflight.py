"""Before the device call, here: does the working tree fit the transfer, and
what exactly to run.

The device tool sends the session's checkout: tracked files and untracked
files git does not ignore, at most 64 MiB in all. This prints that size (and
the largest folders when it is over), the commit to stamp the records with,
and the ``run`` call to make. Exit status 0 when the tree fits, 1 when not.
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


def command(commit: str) -> str:
    return f"GPU_WINDOW_COMMIT={commit} bash training/campaigns/gpu_window.sh"


def main(repo: Path = REPO) -> int:
    files = travelling_files(repo)
    total = sum(b for _, b in files) / 2**20
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
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
        print("the window needs only training/ and perfseer_rt/; see training/campaigns/README.md "
              "('When a GPU is lent') for how to send less")
    if dirty:
        print("note: tracked files have uncommitted changes; the records will name HEAD plus their code hash")
    print("run tool call: command=" + repr(command(head or "unknown")) + ", timeout_s=600, carry=[]")
    return 0 if fits else 1
