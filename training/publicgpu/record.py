"""The record of one published whole-model GPU measurement, in the campaign format.

A record has the fields of a campaign record (:mod:`training.campaign.worker`,
read by :mod:`training.campaign.store` and :mod:`training.seernet.data`)::

    kind          "inference" | "train"      (the mode)
    target        "published-pytorch-eager-inference" | "...-train": never a target of
                  ours (training.campaign.targets.TARGETS), never "cpu-*"
    arch_id       first 16 hex of sha256 of {"family", "params"} (the zoo's rule: a
                  timm model equals the zoo's ``timm:model=NAME,res=SIZE`` architecture)
    family, group, spec, config, batch, device, status ("ok"), error (None)
    metrics       {"latency_ms" | "step_ms": mean step time, "samples_per_s": ...}
    quality       {"statistic": "mean", "runs": timed steps, "warmup_runs": ...}
    input_shapes  {"input": [B, 3, H, W]} or {"input_ids": [B, seq]}
    split_arch, split_family, split_real   (training.dataset.splits)
    graph_key     None: no PerfGraph is stored with these records (see ``onnx``)
    reference     False
    env           {"gpu_name", "framework", "torch_version", "cuda_version"}
    measured_at   None (the publishers give no date per run)
    flops, params, nodes   None (they come from a graph; see ``published``)

and these fields of their own (the documented extension):

    measured_by   "others": never measured by us (our own records lack the field)
    provenance    {"source", "repository", "licence", "file", "line", "commits"}
    setup         {"runtime", "precision", "layout", "mode", "step"}: how it ran
    arch_kind     cnn | mobile-cnn | vit | hybrid | mlp-mixer | other (training.publicgpu.families)
    published     the row's other published values, as published (param_count_m,
                  gmacs at batch 1, ...)
    onnx          the structure-only rebuild, relative to the export cache
                  (``torchscript/<model>@<img_size>.onnx``; see training.publicgpu.exports)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from training.dataset.splits import split_arch, split_family, split_real
from training.publicgpu.cache import onnx_name

#: The ``target`` of a published measurement, by mode.
TARGET = {"inference": "published-pytorch-eager-inference", "train": "published-pytorch-eager-train"}
#: The time metric of each mode (the campaign's names).
TIME_METRIC = {"inference": "latency_ms", "train": "step_ms"}
#: timm's benchmark.py: 10 warm-up steps, then the mean of 40 timed steps.
TIMM_QUALITY = {"statistic": "mean", "runs": 40, "warmup_runs": 10}


@dataclass(frozen=True)
class Provenance:
    """Where a row comes from: ``file`` in ``repository`` at one of ``commits``;
    ``line``: the row's line in ``file`` (1 is the header; 0: the file is the row)."""

    source: str
    repository: str
    licence: str
    file: str
    line: int
    commits: tuple[str, ...]


@dataclass(frozen=True)
class Setup:
    """How a row was measured (the environment the publisher names)."""

    device: str  # our device name, e.g. "rtx3090"
    gpu_name: str  # marketing name as the driver reports it
    framework: str  # "PyTorch"
    framework_version: str  # "2.4"
    cuda_version: str | None  # "12.4"; None when not published
    runtime: str  # "PyTorch eager"
    precision: str  # "amp-fp16" | "fp32"
    layout: str  # "nchw" | "nhwc" | "n/a" (token inputs)
    mode: str  # "inference" | "train"
    step: str  # what one timed step does


def arch_id_of(family: str, params: dict) -> str:
    """The zoo's architecture id of ``{"family", "params"}`` (training.zoo.config)."""
    text = json.dumps({"family": family, "params": params}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


def campaign_record(*, family: str, params: dict, spec: str, group: str, arch_kind: str,
                    batch: int, time_ms: float, samples_per_s: float | None,
                    input_shapes: dict[str, list[int]], setup: Setup, provenance: Provenance,
                    quality: dict, published: dict, onnx: str | None) -> dict[str, Any]:
    """One published measurement as a campaign record (see module doc)."""
    arch_id = arch_id_of(family, params)
    metrics = {TIME_METRIC[setup.mode]: time_ms}
    if samples_per_s is not None:
        metrics["samples_per_s"] = samples_per_s
    return {
        "kind": setup.mode, "target": TARGET[setup.mode], "arch_id": arch_id, "family": family,
        "group": group, "arch_kind": arch_kind, "spec": spec,
        "config": {"family": family, "params": params}, "batch": int(batch),
        "device": setup.device, "status": "ok", "error": None, "metrics": metrics,
        "quality": dict(quality), "input_shapes": input_shapes,
        "split_arch": split_arch(arch_id), "split_family": split_family(arch_id, family),
        "split_real": split_real(arch_id, family, group),
        "graph_key": None, "reference": False, "flops": None, "params": None, "nodes": None,
        "env": {"gpu_name": setup.gpu_name, "framework": setup.framework,
                "torch_version": setup.framework_version, "cuda_version": setup.cuda_version},
        "setup": {"runtime": setup.runtime, "precision": setup.precision,
                  "layout": setup.layout, "mode": setup.mode, "step": setup.step},
        "measured_at": None, "measured_by": "others",
        "provenance": {**asdict(provenance), "commits": list(provenance.commits)},
        "published": {k: v for k, v in published.items() if v is not None},
        "onnx": onnx,
    }


def make_record(*, model: str, img_size: int, batch: int, time_ms: float,
                samples_per_s: float | None, group: str, arch_kind: str, setup: Setup,
                provenance: Provenance, published: dict) -> dict[str, Any]:
    """A timm row as a record: the architecture is the zoo's ``timm:model=NAME,res=SIZE``."""
    params = {"model": model, "res": int(img_size)}
    return campaign_record(
        family="timm", params=params, spec=f"timm:model={model},res={img_size}", group=group,
        arch_kind=arch_kind, batch=batch, time_ms=time_ms, samples_per_s=samples_per_s,
        input_shapes={"input": [int(batch), 3, int(img_size), int(img_size)]}, setup=setup,
        provenance=provenance, quality=TIMM_QUALITY, published=published,
        onnx=onnx_name(model, img_size))
