"""How one configuration is measured: the campaign's targets.

A target turns ``(ONNX file, zoo config, batch)`` into a profile record (the
fields of :mod:`perfseer_rt.profile.record` or
:data:`training.profile_train.TRAIN_FIELDS`) with ``status`` ``"ok"``,
``"oom"`` or ``"error"``. Every target measures in a child process, so a
crash costs one record.

| name | measures | with |
| --- | --- | --- |
| ``cpu-inference`` | one batch, onnxruntime CPU EP | :class:`perfseer_rt.profile.ProfileWorker` |
| ``cuda-inference`` | one batch, onnxruntime CUDA EP, IO binding, NVML | same, provider ``cuda`` |
| ``cpu-train`` / ``cuda-train`` | one optimizer step in torch | :class:`training.profile_train.TrainWorker` |

``dry_run`` runs a CUDA target's whole path on the CPU (CPU provider / torch
CPU, tiny budgets): a stand-in device for machines without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perfseer_rt.profile import PRESETS, MeasureSettings, ProfileWorker, environment

#: target name -> (kind, device type)
TARGETS = {"cpu-inference": ("inference", "cpu"), "cuda-inference": ("inference", "cuda"),
           "cpu-train": ("train", "cpu"), "cuda-train": ("train", "cuda")}
#: Metrics each kind records (those the measurement leaves None are left out).
METRICS = {"inference": ("latency_ms", "peak_mem_mb", "sm_util_pct", "gpm_sm_active_pct",
                         "energy_mj"),
           "train": ("step_ms", "peak_mem_mb", "sm_util_pct", "gpm_sm_active_pct", "energy_mj")}
#: The time field of each kind (``<time>_ms``, ``<time>_robust_cv``...).
TIME = {"inference": "latency", "train": "step"}
DRY_SETTINGS = PRESETS["dry-run"]


@dataclass
class TargetSpec:
    """Everything a worker needs to build its target (plain data: travels to Ray workers).

    Attributes:
        name: a key of :data:`TARGETS`.
        settings: the measurement settings (:class:`MeasureSettings` dict).
        threads: intra-op / torch threads on the CPU.
        device_name: the ``device`` field of every record (e.g. ``cpu-amd-epyc-1t``).
        dry_run: measure a CUDA target on the CPU.
        provider_options: onnxruntime CUDA provider options.
        optimizer, lr, builder: the training step's optimizer and model builder.
        timeout_s: one measurement's limit.
    """

    name: str
    settings: dict
    threads: int = 1
    device_name: str = "cpu-1t"
    dry_run: bool = False
    provider_options: dict = field(default_factory=dict)
    optimizer: str = "sgd"
    lr: float = 1e-3
    builder: str | None = None
    timeout_s: float = 600.0

    @property
    def kind(self) -> str:
        return TARGETS[self.name][0]

    @property
    def on_cuda(self) -> bool:
        """Whether the measurement really runs on a GPU."""
        return TARGETS[self.name][1] == "cuda" and not self.dry_run


class Target:
    """A started measuring child for one :class:`TargetSpec`."""

    def __init__(self, spec: TargetSpec, device_id: int = 0):
        self.spec, self.device_id = spec, device_id
        self.kind = spec.kind
        self.settings = MeasureSettings.from_dict(spec.settings)
        self._env: dict | None = None
        if self.kind == "inference":
            # a fresh measuring child for every CPU configuration: a reused one
            # reads more memory for small models than `perfseer-rt profile`
            # does (perfseer_rt.profile.hostmem), and labels must be what users measure
            self._worker: Any = ProfileWorker("cuda" if spec.on_cuda else "cpu",
                                              timeout_s=spec.timeout_s, fresh=not spec.on_cuda)
        else:
            # lazy: profile_train imports torch, which only train targets need
            from training.profile_train import TrainWorker

            self._worker = TrainWorker("cuda" if spec.on_cuda else "cpu", timeout_s=spec.timeout_s)

    def env(self) -> dict:
        """The record's environment block (once per target)."""
        if self._env is None:
            if self.kind == "train":
                from training.profile_train import torch_env  # lazy: torch, train targets only

                self._env = environment(gpu_index=self.device_id if self.spec.on_cuda else None,
                                        **torch_env())
            else:
                self._env = environment(gpu_index=self.device_id if self.spec.on_cuda else None)
        return self._env

    def measure(self, onnx_path: str, config: dict, batch: int, timeout_s: float) -> dict:
        s = self.spec
        if self.kind == "inference":
            return self._worker.measure(onnx_path, batch=batch, threads=s.threads,
                                        settings=self.settings, device_id=self.device_id,
                                        provider_options=s.provider_options if s.on_cuda else None,
                                        timeout_s=timeout_s)
        return self._worker.measure(config, batch, builder=s.builder, optimizer=s.optimizer,
                                    lr=s.lr, settings=self.settings,
                                    threads=None if s.on_cuda else s.threads,
                                    device_id=self.device_id, timeout_s=timeout_s)

    def close(self) -> None:
        self._worker.close()
