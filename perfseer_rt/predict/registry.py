"""The predictors: ``<root>/<device>/manifest.json`` + ONNX.

Shipped ones: ``exported_models/`` ships inside the wheel as the package
``perfseer_rt._exported_models`` (see pyproject.toml) and is found with
importlib.resources; from a source tree without an install, the top-level
``exported_models/`` is used. User ones (written by ``perfseer-rt
calibrate``): under :func:`user_root`. A user entry cannot shadow a shipped
device of the same name (calibrate refuses such names; one found anyway is
skipped).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from perfseer_rt.errors import DeviceError, PerfSeerError
from perfseer_rt.graph import layout
from perfseer_rt.predict.correction import Correction
from perfseer_rt.predict.manifest import FieldScale, Manifest, ManifestError, MemoryParts, Uncertainty, parse_manifest
from perfseer_rt.predict.run_memory import RunMemory, of_folder

MANIFEST = "manifest.json"
#: Used when no device is named (the first of these that ships).
DEFAULT_DEVICES = ("cpu-amd-epyc-1t",)


@dataclass(frozen=True)
class Predictor:
    """One device's predictor: its manifest and folder."""

    device: str
    folder: Path
    manifest: dict[str, Any]
    user: bool = False  # a user entry (``perfseer-rt calibrate``), not shipped
    #: The typed manifest (:mod:`perfseer_rt.predict.manifest`, checked strictly at
    #: load) of a seernet predictor, shipped or calibrated; None for a kind the
    #: schema does not cover (``gpu``: a spec sheet, :mod:`perfseer_rt.gpu.entries`).
    schema: Manifest | None = None

    @property
    def corrections(self) -> dict[str, Correction]:
        """metric -> correction of the base predictor's output (calibrated entries only)."""
        cal = self.manifest.get("calibration") or {}
        return {m: Correction.from_dict(c) for m, c in (cal.get("corrections") or {}).items()}

    @property
    def field_scale(self) -> dict[str, FieldScale]:
        """metric -> its field scale (shipped seernet entries that have one;
        a calibrated entry keeps its base's)."""
        return dict(self.schema.seernet.field_scale or {}) if self.schema is not None else {}

    def _models_section(self) -> dict[str, Any]:
        """The dict holding ``models`` and ``default_model``: the ``seernet``
        section (schema 2), else the manifest itself (gpu entries)."""
        return self.manifest.get("seernet") or self.manifest

    @property
    def outputs(self) -> list[str]:
        """The model's output columns, in order (metrics and memory phases)."""
        return [m["name"] for m in self.manifest["metrics"]]

    @property
    def metrics(self) -> list[str]:
        """The metrics a user asks for: the outputs less the memory phases,
        which are reported as parts of the peak (:attr:`memory`)."""
        mem = self.memory
        phases = {mem.load, mem.run} if mem is not None else set()
        return [m for m in self.outputs if m not in phases]

    @property
    def memory(self) -> MemoryParts | None:
        """How peak memory splits into parts (typed manifests only)."""
        return self.schema.seernet.memory if self.schema is not None else None

    @property
    def run_memory(self) -> RunMemory | None:
        """The run phase from the simulated arena (``run_memory.json`` in the
        folder: :mod:`perfseer_rt.predict.run_memory`); None: the network's."""
        return of_folder(self.folder) if self.schema is not None else None

    @property
    def uncertainty(self) -> Uncertainty | None:
        """Distance score and intervals (typed manifests only)."""
        return self.schema.seernet.uncertainty if self.schema is not None else None

    def unit(self, metric: str) -> str:
        return str(next(m["unit"] for m in self.manifest["metrics"] if m["name"] == metric))

    @property
    def model_entries(self) -> list[dict[str, Any]]:
        return list(self._models_section()["models"])

    def model_file(self, name: str | None = None) -> Path:
        name = name or self.default_model
        entry = next((m for m in self.model_entries if m["name"] == name), None)
        if entry is None:
            raise PerfSeerError(f"device {self.device!r} has no model {name!r}; it has "
                                f"{', '.join(self.model_names)}")
        return self.folder / str(entry["file"])

    @property
    def model_names(self) -> list[str]:
        return [m["name"] for m in self.model_entries]

    @property
    def default_model(self) -> str:
        return str(self._models_section()["default_model"])

    def default_model_for(self, mode: str) -> str:
        """The model a prediction in ``mode`` takes when none is named: the
        entry's ``default_model_by_mode`` where it names one (GPU entries:
        the lower held-out error in that mode), else :attr:`default_model`."""
        return str((self.manifest.get("default_model_by_mode") or {}).get(mode) or self.default_model)

    @property
    def threads(self) -> int:
        """onnxruntime intra-op threads the predictor runs with (from its manifest)."""
        schema = self.schema
        return schema.seernet.session.intra_op_num_threads if schema else 1

    def test_accuracy(self, metric: str, model: str | None = None) -> dict[str, Any]:
        """A model's (default: the default model's) accuracy on the architecture
        split's test set, else the ``test`` split (``{"mape", "within_10", "count",
        ...}``; empty when not recorded)."""
        acc = self.manifest.get("accuracy", {})
        split = acc.get("arch") or acc.get("test") or {}
        return split.get(model or self.default_model, {}).get(metric, {}) or {}

    @property
    def kind(self) -> str:
        """``"seernet"`` (a trained predictor, the default) or ``"gpu"`` (a GPU
        from its spec sheet, :mod:`perfseer_rt.gpu.entries`)."""
        return str(self.manifest.get("kind", "seernet"))

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


def user_root() -> Path:
    """The folder of user device entries: ``$PERFSEER_RT_HOME/devices``, else
    ``$XDG_DATA_HOME/perfseer-rt/devices`` (default ``~/.local/share/perfseer-rt/devices``).
    Not created here."""
    home = os.environ.get("PERFSEER_RT_HOME")
    if home:
        return Path(home).expanduser() / "devices"
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data).expanduser() / "perfseer-rt" / "devices"


@lru_cache(maxsize=None)
def shipped_predictors() -> dict[str, Predictor]:
    """Every shipped predictor by device name."""
    out: dict[str, Predictor] = {}
    for manifest in sorted(models_root().glob(f"*/{MANIFEST}")):
        doc = json.loads(manifest.read_text())
        out[doc["device"]["name"]] = Predictor(doc["device"]["name"], manifest.parent, doc,
                                               schema=typed_manifest(manifest, doc))
    return out


#: Kinds with a strict schema of their own: ``gpu`` entries are made from a
#: spec sheet (:mod:`perfseer_rt.gpu.entries`), validated strictly when read
#: (:mod:`perfseer_rt.gpu.spec_sheet`).
SEPARATE_SCHEMA_KINDS: dict[str, Callable[[Any], Any]] = {"gpu": lambda doc: None}
#: Kinds a GPU spec sheet describes (never the default device: named only).
GPU_KINDS = ("gpu",)
#: Keys a calibrated user entry (``perfseer-rt calibrate``) adds to its base's
#: seernet manifest; the rest is checked by the strict schema.
CALIBRATION_KEYS = ("calibration",)


def typed_manifest(path: Path, doc: dict[str, Any]) -> Manifest | None:
    """``doc`` (read from ``path``) checked by the strict schema; None for a
    :data:`SEPARATE_SCHEMA_KINDS` manifest (checked strictly by its own schema).

    A calibrated entry is its base's seernet manifest plus ``calibration``,
    ``device.base`` and ``accuracy.test_kind``; those are set aside and the
    rest must follow the schema.

    Raises:
        ManifestError: naming the file and the field.
    """
    if isinstance(doc, dict) and doc.get("kind") in SEPARATE_SCHEMA_KINDS:
        try:
            SEPARATE_SCHEMA_KINDS[doc["kind"]](doc)
        except ManifestError as exc:
            raise ManifestError(f"{path}: {exc}") from None
        return None
    if isinstance(doc, dict) and "calibration" in doc:
        doc = {k: v for k, v in doc.items() if k not in CALIBRATION_KEYS}
        if isinstance(doc.get("device"), dict):
            doc["device"] = {k: v for k, v in doc["device"].items() if k != "base"}
        if isinstance(doc.get("accuracy"), dict):
            doc["accuracy"] = {k: v for k, v in doc["accuracy"].items() if k != "test_kind"}
    try:
        return parse_manifest(doc)
    except ManifestError as exc:
        raise ManifestError(f"{path}: {exc}") from None


def predictors() -> dict[str, Predictor]:
    """Every predictor by device name: the shipped ones, the GPUs of the
    shipped and the user's spec sheets, then the user's entries under
    :func:`user_root` (read at each call: calibrate and add-gpu add some)."""
    # lazy: the GPU spec sheets' modules load only when the list needs them (not for a shipped device)
    from perfseer_rt.gpu.entries import gpu_entries

    out = dict(shipped_predictors())
    for name, folder, doc, user in gpu_entries(models_root(), user_root()):
        out.setdefault(name, Predictor(name, folder, doc, user=user))
    for manifest in sorted(user_root().glob(f"*/{MANIFEST}")):
        try:
            doc = json.loads(manifest.read_text())
            name = doc["device"]["name"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not an entry of ours (or a half-removed one): ignore it
        if name not in out:
            out[name] = Predictor(name, manifest.parent, doc, user=True,
                                  schema=typed_manifest(manifest, doc))
    return out


def get_predictor(device: str | None) -> Predictor:
    """The predictor of ``device`` (default: the first of DEFAULT_DEVICES shipped).

    Raises:
        DeviceError: unknown device (the message lists the shipped ones).
        ManifestError: a manifest that does not follow the schema (strict).
    """
    shipped = shipped_predictors()
    if device is None:
        device = next((d for d in DEFAULT_DEVICES if d in shipped and shipped[d].kind not in GPU_KINDS), None)
    if device in shipped:  # a shipped entry wins over any other of its name: no need to list them
        return check_layout(shipped[device])
    # lazy: the GPU spec sheets' modules load only for a device that is not shipped
    from perfseer_rt.gpu.entries import ALIASES as GPU_ALIASES

    found = predictors()
    if not found:
        raise DeviceError(f"no predictors are installed (looked in {models_root()} and {user_root()})")
    if device is None:
        # a GPU from its spec sheet is used only when named
        measured = sorted(d for d, p in found.items() if p.kind not in GPU_KINDS) or sorted(found)
        device = next((d for d in DEFAULT_DEVICES if d in measured), measured[0])
    device = GPU_ALIASES.get(device, device) if device not in found else device
    if device not in found:
        raise DeviceError(f"unknown device {device!r}; known predictors: "
                          f"{', '.join(sorted(found))} (see `perfseer-rt devices`; "
                          "`perfseer-rt calibrate` makes one for this machine)")
    return check_layout(found[device])


def check_layout(pred: Predictor, what: str = "predictor") -> Predictor:
    """``pred`` if it reads a PerfGraph layout this perfseer-rt extracts (the
    current one, or an older one whose globals are a prefix of it), else a
    DeviceError naming both (``what``: how to call it in the message)."""
    version = pred.manifest.get("feature_version")
    if version not in layout.GLOBAL_COLUMNS_OF:
        raise DeviceError(f"{what} {pred.device!r} expects feature layout {version!r}, this "
                          f"perfseer-rt reads {', '.join(layout.GLOBAL_COLUMNS_OF)}; upgrade one of them")
    return pred


# Callers (tests) that drop the cached shipped set call ``predictors.cache_clear()``.
predictors.cache_clear = shipped_predictors.cache_clear  # type: ignore[attr-defined]
