"""How much the README's command 1 installs into a fresh venv (needs the network).

Creates a fresh virtual environment (``python -m venv``, no system site
packages) in a temporary folder, sizes its site-packages, runs the install
command from the repository root with that venv first on PATH, sizes
site-packages again and attributes every file to the distribution whose
RECORD lists it (pip records the .pyc files it compiles). Sizes are the
files' apparent sizes (sum of st_size); ``du`` (disk blocks) is printed
beside the total. The targets (issue 45): the install adds at most 200 MB
(200e6 bytes, 190.7 MiB) on a CPU machine, perfseer-rt's own files at most
12 MB.

Run: ``python -m benchmarks.install_size`` (default: the install part of
README command 1, the text before ``&&``, then the rest of the line, which
must succeed too), ``--command "pip install ."`` for a non-editable
install (what ``pip install perfseer-rt`` from a wheel gives), ``--json
FILE`` to keep the table. Takes about a minute with a warm pip cache.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_BYTES = 200e6
#: perfseer-rt's own files (code and shipped predictors), bytes
OWN_TARGET_BYTES = 12e6
MIB = 2**20

# run inside the fresh venv: bytes per distribution from its RECORD
_PER_DIST = r"""
import json, os, sys
from importlib import metadata
site = os.path.realpath(sys.argv[1])
out = {}
for dist in metadata.distributions(path=[site]):
    total = 0
    for f in dist.files or []:
        p = os.path.realpath(dist.locate_file(f))
        if p.startswith(site + os.sep) and os.path.isfile(p):
            total += os.path.getsize(p)
    out[f"{dist.metadata['Name']} {dist.version}"] = total
print(json.dumps(out))
"""


def readme_command() -> str:
    """README command 1 (the first ```bash block)."""
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.+?)\n```", text)[0]


def tree_bytes(folder: Path) -> tuple[int, int]:
    """(apparent bytes, disk bytes as du counts them) of every file under folder."""
    apparent = disk = 0
    seen: set[tuple[int, int]] = set()
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            apparent += st.st_size
            disk += st.st_blocks * 512
    return apparent, disk


def site_packages(venv: Path) -> Path:
    [site] = venv.glob("lib/python*/site-packages")
    return site


def measure(command: str, python: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="perfseer-install-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        site = site_packages(venv)
        before = tree_bytes(site)
        before_dists = json.loads(subprocess.run(
            [str(venv / "bin/python"), "-c", _PER_DIST, str(site)],
            check=True, capture_output=True, text=True).stdout)
        env = dict(os.environ, VIRTUAL_ENV=str(venv),
                   PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
        env.pop("PYTHONPATH", None)
        env.pop("PYTHONHOME", None)
        res = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env,
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise SystemExit(f"install_size: {command!r} failed (exit {res.returncode}):\n"
                             f"{res.stderr[-3000:]}")
        after = tree_bytes(site)
        dists = json.loads(subprocess.run(
            [str(venv / "bin/python"), "-c", _PER_DIST, str(site)],
            check=True, capture_output=True, text=True).stdout)
    added = {k: v for k, v in dists.items() if k not in before_dists}
    return {"command": command, "python": python,
            "before_bytes": before[0], "after_bytes": after[0],
            "added_bytes": after[0] - before[0],
            "added_disk_bytes": after[1] - before[1],
            "per_distribution": dict(sorted(added.items(), key=lambda kv: -kv[1])),
            "unattributed_bytes": after[0] - before[0]
            - (sum(dists.values()) - sum(before_dists.values())),
            "target_bytes": TARGET_BYTES,
            "command_output_tail": res.stdout[-2000:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--command", default=None,
                    help="shell command run from the repository root in the fresh venv "
                         "(default: README command 1)")
    ap.add_argument("--python", default=sys.executable, help="interpreter that makes the venv")
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args()
    command = args.command or readme_command()
    r = measure(command, args.python)
    print(f"command: {r['command']}")
    print(f"fresh venv site-packages: {r['before_bytes'] / MIB:.1f} MiB (pip, setuptools)")
    for name, size in r["per_distribution"].items():
        print(f"  {size / MIB:7.1f} MiB  {name}")
    if r["unattributed_bytes"]:
        print(f"  {r['unattributed_bytes'] / MIB:7.1f} MiB  (files no RECORD lists)")
    added = r["added_bytes"]
    print(f"added to site-packages: {added / MIB:.1f} MiB = {added / 1e6:.1f} MB "
          f"(du: {r['added_disk_bytes'] / MIB:.1f} MiB); target <= {TARGET_BYTES / 1e6:.0f} MB: "
          f"{'met' if added <= TARGET_BYTES else 'NOT met'}")
    own = sum(v for k, v in r["per_distribution"].items() if k.split()[0].lower() in ("perfseer-rt", "perfseer_rt"))
    print(f"perfseer-rt's own files: {own / MIB:.1f} MiB = {own / 1e6:.1f} MB; target <= "
          f"{OWN_TARGET_BYTES / 1e6:.0f} MB: {'met' if own <= OWN_TARGET_BYTES else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps(r, indent=2) + "\n")


if __name__ == "__main__":
    main()
