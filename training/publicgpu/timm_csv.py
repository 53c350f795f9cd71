"""timm's published benchmark CSVs -> one record per row, with provenance.

A file ``benchmark-{infer|train}-amp-{nchw|nhwc}-pt{VER}-cu{VER}-{gpu}.csv``
(timm's ``results/`` naming) holds one row per model: the time of one step in
ms (``*_step_time``: the mean over 40 timed steps after 10 warm-up steps),
samples per second over the timed run, the batch size that ran
(``*_batch_size``: 1024 or 512 at the start, halved after an out-of-memory
error), the image side (``*_img_size``), parameters (millions) and, for
inference, GMACs and activations (millions) at batch 1 (fvcore). The GPU,
PyTorch and CUDA versions, precision, layout and mode come from the file name;
the timm commit from the shared README (:data:`COMMITS`).

Records follow the campaign engine's format (:mod:`training.publicgpu.record`).
Only the shared copies in ``/work/shared/external/timm-gpu-benchmarks`` are
read; timm's other files are reserved (README of that folder).
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

from training.publicgpu.families import arch_kind, renamed_to, timm_module
from training.publicgpu.record import Provenance, Setup, make_record

#: The shared copies (measured by the timm maintainers; see its README).
SHARED = Path("/work/shared/external/timm-gpu-benchmarks")
SOURCE = "timm benchmark CSV, measured by the timm maintainers, not us"
REPOSITORY = "huggingface/pytorch-image-models"
LICENCE = "Apache-2.0"
#: PyTorch version in the file name -> timm commit(s) the shared README names for it.
COMMITS = {"1.12": ("c865028c",), "1.13": ("89b04521",), "2.1": ("79548b54",),
           "2.4": ("5c33776a", "ee5b1e82")}
#: What one timed step of timm's benchmark.py does, by mode (the data card says it in full).
STEP = {"inference": "forward; autocast fp16; no autograd",
        "train": "forward + CE loss + backward + SGD step (momentum 0.9, Nesterov); autocast fp16; no grad scaler"}
#: GPU in the file name -> (our device name, marketing name as the driver reports it).
GPUS = {"rtx3090": ("rtx3090", "NVIDIA GeForce RTX 3090"),
        "rtx4090": ("rtx4090", "NVIDIA GeForce RTX 4090")}
_FILE = re.compile(r"^benchmark-(?P<mode>infer|train)-(?P<precision>amp)-(?P<layout>nchw|nhwc)"
                   r"-pt(?P<pt>\d+)-cu(?P<cu>\d+)-(?P<gpu>[a-z0-9]+)\.csv$")
#: Files of timm's that are reserved for an independent check and must never be read here.
_RESERVED = re.compile(r"dynamo|compile|rtx5090|pro6000|rtx-pro|pt29\d|pt2\.9", re.I)


class BenchmarkFileError(ValueError):
    """A file whose name or columns are not those of a timm benchmark CSV."""


@dataclass(frozen=True)
class BenchmarkFile:
    """What a timm benchmark file's name says about its rows."""

    name: str
    mode: str  # "inference" | "train"
    precision: str  # "amp-fp16"
    layout: str  # "nchw" | "nhwc"
    torch_version: str  # "2.4"
    cuda_version: str  # "12.4"
    gpu_key: str  # "rtx3090"

    @property
    def prefix(self) -> str:
        """Column prefix: ``infer`` or ``train``."""
        return "infer" if self.mode == "inference" else "train"

    @property
    def folder(self) -> str:
        """Dataset folder of the file's records: ``<gpu>/<mode>-<precision>-<layout>-pt<ver>``."""
        return f"{self.gpu_key}/{self.mode}-{self.precision}-{self.layout}-pt{self.torch_version}"


def _torch_version(digits: str) -> str:
    """``"240"`` -> ``"2.4"``, ``"113"`` -> ``"1.13"`` (timm's ``ptNNN``)."""
    return f"1.{digits[1:]}" if digits.startswith("1") else f"{digits[0]}.{digits[1:].rstrip('0') or '0'}"


def _cuda_version(digits: str) -> str:
    """``"124"`` -> ``"12.4"``, ``"113"`` -> ``"11.3"`` (timm's ``cuNNN``)."""
    return f"{digits[:-1]}.{digits[-1]}"


def parse_name(name: str) -> BenchmarkFile:
    """Parse a benchmark file name (see module doc); reserved names are refused."""
    if _RESERVED.search(name):
        raise BenchmarkFileError(f"{name}: reserved for an independent check; not read")
    m = _FILE.match(name)
    if m is None:
        raise BenchmarkFileError(f"{name}: not a timm benchmark file name "
                                 "(benchmark-{infer|train}-amp-{nchw|nhwc}-ptNNN-cuNNN-GPU.csv)")
    if m["gpu"] not in GPUS:
        raise BenchmarkFileError(f"{name}: unknown GPU {m['gpu']!r} (known: {', '.join(GPUS)})")
    torch_version = _torch_version(m["pt"])
    if torch_version not in COMMITS:
        raise BenchmarkFileError(f"{name}: no timm commit known for PyTorch {torch_version}")
    return BenchmarkFile(name=name, mode="inference" if m["mode"] == "infer" else "train",
                         precision="amp-fp16", layout=m["layout"], torch_version=torch_version,
                         cuda_version=_cuda_version(m["cu"]), gpu_key=m["gpu"])


def _number(row: dict, key: str) -> float | None:
    text = (row.get(key) or "").strip()
    if not text:
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def setup_of(f: BenchmarkFile) -> Setup:
    """How the file's rows were measured (timm's ``benchmark.py``; see the data card)."""
    device, gpu = GPUS[f.gpu_key]
    step = STEP[f.mode]
    return Setup(step=step, device=device, gpu_name=gpu, framework="PyTorch", framework_version=f.torch_version,
                 cuda_version=f.cuda_version, runtime="PyTorch eager", precision=f.precision,
                 layout=f.layout, mode=f.mode)


def read_file(path: Path) -> list[dict]:
    """The records of one benchmark CSV (rows without a step time are counted, not kept)."""
    f = parse_name(path.name)
    setup = setup_of(f)
    p = f.prefix
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        need = {"model", f"{p}_step_time", f"{p}_batch_size", f"{p}_img_size",
                f"{p}_samples_per_sec", "param_count"}
        missing = need - set(reader.fieldnames or ())
        if missing:
            raise BenchmarkFileError(f"{path.name}: missing column(s) {', '.join(sorted(missing))}")
        rows = list(reader)
    out = []
    for i, row in enumerate(rows, start=2):  # line numbers in the file (1 is the header)
        step_ms = _number(row, f"{p}_step_time")
        batch, img = _number(row, f"{p}_batch_size"), _number(row, f"{p}_img_size")
        if step_ms is None or batch is None or img is None or step_ms <= 0:
            continue
        name = row["model"].strip()
        module = timm_module(name)
        prov = Provenance(source=SOURCE, repository=REPOSITORY, licence=LICENCE,
                          file=path.name, line=i, commits=COMMITS[f.torch_version])
        published = {"param_count_m": _number(row, "param_count"),
                     "gmacs": _number(row, f"{p}_gmacs"), "macts_m": _number(row, f"{p}_macts"),
                     "renamed_to": renamed_to(name)}
        out.append(make_record(model=name, img_size=int(img), batch=int(batch), time_ms=step_ms,
                               samples_per_s=_number(row, f"{p}_samples_per_sec"),
                               group=module, arch_kind=arch_kind(module, name), setup=setup,
                               provenance=prov, published=published))
    return out


def shared_files(folder: Path = SHARED) -> list[Path]:
    """The benchmark CSVs of the shared folder, sorted (reserved names never appear there)."""
    return sorted(p for p in folder.glob("benchmark-*.csv") if not _RESERVED.search(p.name))
