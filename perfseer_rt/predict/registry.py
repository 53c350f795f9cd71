"""The shipped predictors: ``exported_models/<device>/manifest.json`` + ONNX.

The folder ships inside the wheel as the package ``perfseer_rt._exported_models``
(see pyproject.toml) and is found with importlib.resources; from a source
tree without an install, the top-level ``exported_models/`` is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from perfseer_rt.errors import DeviceError, PerfSeerError
from perfseer_rt.graph import layout
from perfseer_rt.predict.manifest import Manifest, MetricAccuracy, read_manifest

MANIFEST = "manifest.json"
#: Used when no device is named (the first of these that ships).
DEFAULT_DEVICES = ("h200", "h100", "cpu-amd-epyc-1t")


@dataclass(frozen=True)
class Predictor:
    """One device's predictor: its typed manifest and folder."""

    device: str
    folder: Path
    manifest: Manifest

    @property
    def metrics(self) -> list[str]:
        return self.manifest.metric_names

    def unit(self, metric: str) -> str:
        return next(m.unit for m in self.manifest.metrics if m.name == metric)

    def model_file(self, name: str | None = None) -> Path:
        section = self.manifest.seernet
        name = name or section.default_model
        entry = next((m for m in section.models if m.name == name), None)
        if entry is None:
            raise PerfSeerError(f"device {self.device!r} has no model {name!r}; it has "
                                f"{', '.join(self.model_names)}")
        return self.folder / entry.file

    @property
    def model_names(self) -> list[str]:
        return [m.name for m in self.manifest.seernet.models]

    @property
    def default_model(self) -> str:
        return self.manifest.seernet.default_model

    @property
    def threads(self) -> int:
        """onnxruntime intra-op threads the predictor runs with (from its manifest)."""
        return self.manifest.seernet.session.intra_op_num_threads

    def test_accuracy(self, metric: str, model: str | None = None) -> MetricAccuracy | None:
        """A model's (default: the default model's) accuracy on the architecture
        split's test set (else the ``test`` split), None when not recorded."""
        acc = self.manifest.accuracy
        split = acc.get("arch") or acc.get("test") or {}
        return split.get(model or self.default_model, {}).get(metric)

    @property
    def mig_gpu(self) -> str | None:
        """The MIG profile table (``mig.MIG_PROFILES`` key) of this GPU, if any."""
        return self.manifest.mig_gpu


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
    """Every shipped predictor by device name.

    Raises:
        ManifestError: a manifest that does not follow the schema (strict).
    """
    out: dict[str, Predictor] = {}
    root = models_root()
    for manifest in sorted(root.glob(f"*/{MANIFEST}")):
        doc = read_manifest(manifest)
        out[doc.device.name] = Predictor(doc.device.name, manifest.parent, doc)
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
        device = next((d for d in DEFAULT_DEVICES if d in found), sorted(found)[0])
    if device not in found:
        raise DeviceError(f"unknown device {device!r}; shipped predictors: "
                          f"{', '.join(sorted(found))} (see `perfseer-rt devices`)")
    pred = found[device]
    version = pred.manifest.feature_version
    if version != layout.FEATURE_VERSION:
        raise DeviceError(f"predictor {device!r} expects feature layout {version!r}, this "
                          f"perfseer-rt extracts {layout.FEATURE_VERSION!r}; upgrade one of them")
    return pred
