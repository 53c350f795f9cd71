"""A CPU device's run phase from the simulated arena: ``run_memory.json``.

The run phase of peak memory (``run_peak_mb``: the process while the model
runs, over the baseline after importing onnxruntime) is what the created
session holds plus what its arena makes resident for the activations:

    run_peak_mb = intercept_mb + sum(coefficient[c] * u[c] / 2**20)
                  + arena_scale * resident / 2**20

``u[c]`` are the graph's weight columns (bytes of weights by the operator
that reads them: onnxruntime pre-packs convolution and MatMul weights
differently, :mod:`perfseer_rt.graph.structure`), ``resident`` the bytes
:func:`perfseer_rt.predict.ort_arena.footprint` simulates. A device folder
that holds :data:`RUN_MEMORY_FILE` (written by ``python -m
training.byod.run_memory``, fitted on the device's own measurements) has its
run phase computed so instead of by its network, whose learned run phase
grows wrong with the batch (``reports/cpu-calibrate``). The file is read
strictly: a missing or unknown field is a :class:`ManifestError` naming it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from perfseer_rt.graph import layout
from perfseer_rt.predict.manifest import ManifestError
from perfseer_rt.predict.ort_arena import footprint

RUN_MEMORY_FILE = "run_memory.json"
FORMAT = "perfseer-rt-run-memory"
VERSION = 1
#: The global columns the session's resident part may use (bytes of weights).
WEIGHT_COLUMNS = ("weight_conv1x1", "weight_conv_kxk", "weight_conv_grouped", "weight_matmul",
                  "weight_other", "weight_conv_unaligned")
_FIELDS = ("format", "version", "simulator", "intercept_mb", "weight_coefficients", "arena_scale",
           "fitted_on", "held_out")


@dataclass(frozen=True)
class RunMemory:
    """The fitted run-phase model of one device (module doc).

    ``intercept_mb`` MiB; ``weight_coefficients`` column -> MiB per MiB of
    weights; ``arena_scale`` MiB of run phase per MiB the arena simulation
    makes resident; ``fitted_on`` and ``held_out`` are provenance (data,
    command) and the errors measured with families held out."""

    intercept_mb: float
    weight_coefficients: dict[str, float]
    arena_scale: float
    simulator: str
    fitted_on: dict[str, Any]
    held_out: dict[str, Any]

    def session_mb(self, u: np.ndarray) -> float:
        """MiB the created session holds for a graph with globals ``u``."""
        cols = layout.GLOBAL_COLUMNS
        return self.intercept_mb + sum(c * float(u[cols.index(k)]) / 2**20
                                       for k, c in self.weight_coefficients.items())

    def run_phase_mb(self, graphs: Sequence[Any]) -> np.ndarray:
        """``run_peak_mb`` of each PerfGraph, MiB."""
        return np.array([self.session_mb(g.u) + self.arena_scale * footprint(
            g.x, g.edge_index, g.edge_attr).resident / 2**20 for g in graphs], dtype=np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "simulator": self.simulator,
                "intercept_mb": self.intercept_mb, "weight_coefficients": dict(self.weight_coefficients),
                "arena_scale": self.arena_scale, "fitted_on": self.fitted_on, "held_out": self.held_out}


def parse(doc: Mapping[str, Any], where: str = RUN_MEMORY_FILE) -> RunMemory:
    """A :class:`RunMemory` from its JSON document.

    Raises:
        ManifestError: a field missing, unknown or out of range (named).
    """
    if not isinstance(doc, Mapping):
        raise ManifestError(f"{where}: not a JSON object")
    for name in _FIELDS:
        if name not in doc:
            raise ManifestError(f"{where}: field {name!r} missing")
    extra = sorted(set(doc) - set(_FIELDS))
    if extra:
        raise ManifestError(f"{where}: unknown field {extra[0]!r}")
    if doc["format"] != FORMAT or doc["version"] != VERSION:
        raise ManifestError(f"{where}: format {doc['format']!r} version {doc['version']!r}, "
                            f"expected {FORMAT!r} version {VERSION}")
    coefs = doc["weight_coefficients"]
    if not isinstance(coefs, Mapping) or not set(coefs) <= set(WEIGHT_COLUMNS):
        raise ManifestError(f"{where}: field 'weight_coefficients' must map some of {list(WEIGHT_COLUMNS)} "
                            "to numbers")
    for name, value in [("intercept_mb", doc["intercept_mb"]), ("arena_scale", doc["arena_scale"])] + [
            (f"weight_coefficients.{k}", v) for k, v in coefs.items()]:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value < 0:
            raise ManifestError(f"{where}: field {name!r} is {value!r}, expected a finite number >= 0")
    if not doc["arena_scale"] > 0:
        raise ManifestError(f"{where}: field 'arena_scale' is {doc['arena_scale']!r}, expected > 0")
    return RunMemory(intercept_mb=float(doc["intercept_mb"]),
                     weight_coefficients={k: float(v) for k, v in coefs.items()},
                     arena_scale=float(doc["arena_scale"]), simulator=str(doc["simulator"]),
                     fitted_on=dict(doc["fitted_on"]), held_out=dict(doc["held_out"]))


@lru_cache(maxsize=32)
def of_folder(folder: Path) -> RunMemory | None:
    """The device folder's run-phase model; None when it has none.

    Raises:
        ManifestError: the file is there but not valid JSON or not valid.
    """
    path = Path(folder) / RUN_MEMORY_FILE
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{path}: cannot be read as JSON ({exc})") from None
    return parse(doc, str(path))
