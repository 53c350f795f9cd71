"""The two distributions built from this tree resolve to one onnxruntime each.

``pip install perfseer-rt`` must give the CPU onnxruntime and
``pip install perfseer-rt-gpu`` (``pip install ./gpu`` from a checkout)
onnxruntime-gpu instead: the two wheels install the same ``onnxruntime``
module, and an extra cannot remove a base requirement, so the choice is the
distribution's name (as fastembed / fastembed-gpu do). Each distribution's
metadata is built by pip (dry run) from a copy of the tree (nothing written here)
and its requirements are resolved for this machine with each extra.
"""

import json
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "gpu"))
from sync_pyproject import gpu_pyproject  # noqa: E402

SLOW = pytest.mark.slow  # two pip metadata builds, ~15 s

ORT = {"onnxruntime", "onnxruntime-gpu"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    dst = tmp_path_factory.mktemp("tree")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, dst / name)
    for name in ("perfseer_rt", "exported_models"):
        shutil.copytree(ROOT / name, dst / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(ROOT / "gpu", dst / "gpu", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    return dst


def built_metadata(project: Path) -> dict:
    """Name and Requires-Dist of the distribution built from ``project``, as
    pip builds it (isolated build, ``--dry-run --no-deps``: nothing is
    downloaded but the build backend, nothing installed)."""
    report = project / "_report.json"
    # an isolated build first fetches the backend (~20 s); the one here serves when recent
    isolation = ["--no-build-isolation"] if _backend_here() else []
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps",
                          "--ignore-installed", "--quiet", *isolation, "--report", str(report),
                          str(project)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    [item] = json.loads(report.read_text())["install"]
    return {"name": item["metadata"]["name"],
            "requires": item["metadata"].get("requires_dist", [])}


def _backend_here() -> bool:
    """setuptools >= 68 (pyproject's build requirement) and wheel installed here."""
    try:
        return Version(metadata.version("setuptools")) >= Version("68") and \
            bool(metadata.version("wheel"))
    except metadata.PackageNotFoundError:
        return False


def resolve(requires: list[str], extra: str = "") -> set[str]:
    """First-level requirements that apply here with ``extra`` (pip's rule:
    the base requirements always, an extra's on top)."""
    names = set()
    for text in requires:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}) or \
                (extra and req.marker.evaluate({"extra": extra})):
            names.add(canonicalize_name(req.name))
    return names


def test_gpu_pyproject_is_generated_from_the_cpu_one():
    assert (ROOT / "gpu/pyproject.toml").read_text() == \
        gpu_pyproject((ROOT / "pyproject.toml").read_text()), \
        "gpu/pyproject.toml is stale: run python gpu/sync_pyproject.py"
    for link in ("perfseer_rt", "exported_models", "README.md"):
        path = ROOT / "gpu" / link
        assert path.is_symlink() and path.resolve() == (ROOT / link).resolve()


@pytest.fixture(scope="module")
def metas(tree):
    return {"cpu": built_metadata(tree), "gpu": built_metadata(tree / "gpu")}


@SLOW
@pytest.mark.parametrize("extra", ["", "serve", "networkx"])
def test_each_distribution_resolves_one_onnxruntime(metas, extra):
    cpu, gpu = metas["cpu"], metas["gpu"]
    assert cpu["name"] == "perfseer-rt" and gpu["name"] == "perfseer-rt-gpu"
    assert resolve(cpu["requires"], extra) & ORT == {"onnxruntime"}
    assert resolve(gpu["requires"], extra) & ORT == {"onnxruntime-gpu"}
    # the same package otherwise, plus NVML on the GPU
    assert resolve(cpu["requires"], extra) - ORT == \
        resolve(gpu["requires"], extra) - ORT - {"nvidia-ml-py"}
    assert "nvidia-ml-py" in resolve(gpu["requires"], extra) - resolve(cpu["requires"], extra)
    if extra == "serve":
        assert {"fastapi", "uvicorn"} <= resolve(cpu["requires"], extra)


@SLOW
def test_base_install_is_lean(metas):
    """The plain install carries no torch, sympy, networkx, web stack or NVML."""
    base = resolve(metas["cpu"]["requires"])
    assert base == {"onnx", "onnxruntime", "numpy", "click", "tqdm"}


def test_mixed_onnxruntime_flavours_are_named(monkeypatch):
    """Both builds in one environment (or none): one line naming the fix."""
    from perfseer_rt import install
    from perfseer_rt.errors import PerfSeerError

    assert install.check_onnxruntime() in install.FLAVOURS  # this environment is sound
    real = metadata.version

    def both(name):
        return "1.0" if name in install.FLAVOURS else real(name)

    monkeypatch.setattr(install.metadata, "version", both)
    with pytest.raises(PerfSeerError, match="both onnxruntime and onnxruntime-gpu"):
        install.check_onnxruntime()
