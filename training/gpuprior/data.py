"""NeuSight's kernel measurements (``external/neusight-kernels``) as arrays.

One :class:`Family` per operator file: the kernel shapes in the GEMM / row
view of :mod:`perfseer_rt.gpu.features`, the device of every row, its spec
sheet, and the measured latency in ms (NeuSight's mean over their repeats).
"""

from __future__ import annotations

import csv
import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfseer_rt.gpu import features as F
from perfseer_rt.gpu.specs import GpuSpec

DEFAULT_ROOT = Path(os.environ.get("PERFSEER_NEUSIGHT",
                                   Path(__file__).resolve().parents[2].parent / "shared"
                                   / "external" / "neusight-kernels"))
SHARED_ROOT = Path("/work/shared/external/neusight-kernels")

FILES = {"bmm": "bmm.csv.gz", "linear": "linear.csv.gz", "conv": "conv.csv.gz",
         "elem": "elem.csv.gz", "ln": "ln.csv.gz", "softmax": "softmax.csv.gz"}

#: NeuSight element-wise op names: (two tensor inputs, transcendental).
#: ``*u`` are the scalar ("unary") forms, e.g. ``x + 2``.
ELEM_OPS = {"add": (1, 0), "mul": (1, 0), "div": (1, 0), "pow": (1, 1),
            "addu": (0, 0), "mulu": (0, 0), "divu": (0, 0), "powu": (0, 1),
            "relu": (0, 0), "gelu": (0, 1), "tanh": (0, 1)}


def data_root(root: str | os.PathLike | None = None) -> Path:
    for cand in ([Path(root)] if root else []) + [DEFAULT_ROOT, SHARED_ROOT]:
        if (cand / "device_configs").is_dir():
            return cand
    raise FileNotFoundError("neusight-kernels data not found; pass --data or set PERFSEER_NEUSIGHT")


def load_specs(root: Path) -> dict[str, GpuSpec]:
    """Spec sheets by NeuSight device name."""
    out = {}
    for path in sorted((root / "device_configs").glob("*.json")):
        spec = GpuSpec.from_config(json.loads(path.read_text()))
        out[spec.name] = spec
    return out


@dataclass
class Family:
    name: str
    shape: dict[str, np.ndarray]
    devices: np.ndarray          #: NeuSight device name per row
    specs: list[GpuSpec]         #: spec sheet per row
    latency_ms: np.ndarray

    def __len__(self) -> int:
        return len(self.latency_ms)

    def spec(self) -> dict[str, np.ndarray]:
        return F.spec_arrays(self.specs, len(self))

    def subset(self, mask: np.ndarray) -> "Family":
        idx = np.flatnonzero(mask)
        return Family(self.name, {k: v[idx] for k, v in self.shape.items()},
                      self.devices[idx], [self.specs[i] for i in idx], self.latency_ms[idx])


def load_family(name: str, root: Path, specs: dict[str, GpuSpec]) -> Family:
    with gzip.open(root / FILES[name], "rt", newline="") as fh:
        rows = list(csv.DictReader(fh))

    def col(key):
        return np.array([float(r[key]) for r in rows])

    if name in ("bmm", "linear"):
        shape = F.gemm_shape(col("B"), col("M"), col("N"), col("K"),
                             weight_batched=name == "bmm", bias=name == "linear")
    elif name == "conv":
        shape = F.conv_shape(col("B"), col("Input_Channel"), col("Output_Channel"),
                             col("Kernel_Szie"), col("Input_Size"), col("Stride"), col("Padding"))
    else:
        flags = np.array([ELEM_OPS[r["OPName"]] if name == "elem" else (0, 0) for r in rows])
        shape = F.row_shape(name, col("B"), col("H"), binary=flags[:, 0],
                            transcendental=flags[:, 1])
    devices = np.array([r["Device"] for r in rows])
    return Family(name, shape, devices, [specs[d] for d in devices], col("Latency"))
