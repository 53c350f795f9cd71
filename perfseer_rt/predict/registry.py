"""The shipped predictors: ``exported_models/<device>/manifest.json`` + ONNX.

The folder ships inside the wheel as the package ``perfseer_rt._exported_models``
(see pyproject.toml) and is found with importlib.resources; from a source
tree without an install, the top-level ``exported_models/`` is used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from perfseer_rt.errors import DeviceError, PerfSeerError
from perfseer_rt.graph import layout

MANIFEST = "manifest.json"
#: Used when no device is named (the first of these that ships).
DEFAULT_DEVICES = ("h200", "h100", "cpu-amd-epyc-1t")


@dataclass(frozen=True)
class Predictor:
    """One device's predictor: its manifest and folder."""

    device: str
    folder: Path
    manifest: dict

    @property
    def metrics(self) -> list[str]:
        return [m["name"] for m in self.manifest["metrics"]]

    def unit(self, metric: str) -> str:
        return next(m["unit"] for m in self.manifest["metrics"] if m["name"] == metric)

    def model_file(self, name: str | None = None) -> Path:
        name = name or self.manifest["default_model"]
        entry = next((m for m in self.manifest["models"] if m["name"] == name), None)
        if entry is None:
            raise PerfSeerError(f"device {self.device!r} has no model {name!r}; it has "
                                f"{', '.join(m['name'] for m in self.manifest['models'])}")
        return self.folder / entry["file"]

    @property
    def model_names(self) -> list[str]:
        return [m["name"] for m in self.manifest["models"]]

    def test_accuracy(self, metric: str, model: str | None = None) -> dict:
        """A model's (default: the default model's) accuracy on the architecture
        split's test set (``{"mape", "within_10", "count"}``; empty when not recorded)."""
        acc = self.manifest.get("accuracy", {})
        split = acc.get("arch") or acc.get("test") or {}
        return split.get(model or self.manifest.get("default_model"), {}).get(metric, {}) or {}

    @property
    def kind(self) -> str:
        """``"seernet"`` (a trained predictor, the default) or ``"gpu-prior"``
        (:mod:`perfseer_rt.gpu`: public kernel prior + spec sheet)."""
        return self.manifest.get("kind", "seernet")

    @property
    def mig_gpu(self) -> str | None:
        """The MIG profile table (``mig.MIG_PROFILES`` key) of this GPU, if any."""
        return self.manifest.get("mig_gpu")


def models_root() -> Path:
    try:
        root = resources.files("perfseer_rt._exported_models")
        path = Path(str(root))
        if path.is_dir():
            return path
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parents[2] / "exported_models"


@lru_cache(maxsize=None)
def predictors() -> dict[str, Predictor]:
    """Every shipped predictor by device name."""
    out: dict[str, Predictor] = {}
    root = models_root()
    for manifest in sorted(root.glob(f"*/{MANIFEST}")):
        doc = json.loads(manifest.read_text())
        name = doc["device"]["name"]
        out[name] = Predictor(name, manifest.parent, doc)
    return out


def get_predictor(device: str | None) -> Predictor:
    """The predictor of ``device`` (default: the first of DEFAULT_DEVICES shipped).

    Raises:
        DeviceError: unknown device (the message lists the shipped ones).
    """
    found = predictors()
    if not found:
        raise DeviceError(f"no predictors are installed (looked in {models_root()})")
    if device is None:
        # a prior (kind gpu-prior) is used only when named
        measured = sorted(d for d, p in found.items() if p.kind != "gpu-prior") or sorted(found)
        device = next((d for d in DEFAULT_DEVICES if d in measured), measured[0])
    if device not in found:
        raise DeviceError(f"unknown device {device!r}; shipped predictors: "
                          f"{', '.join(sorted(found))} (see `perfseer-rt devices`)")
    pred = found[device]
    version = pred.manifest.get("feature_version")
    if version != layout.FEATURE_VERSION:
        raise DeviceError(f"predictor {device!r} expects feature layout {version!r}, this "
                          f"perfseer-rt extracts {layout.FEATURE_VERSION!r}; upgrade one of them")
    return pred
