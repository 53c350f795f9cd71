"""Zoo configs made ready to measure: ONNX export (inference) and module + inputs (training).

Both run in worker processes: :func:`export_case` in the inference
campaign's export pool, :func:`build_train_case` inside the training-step
worker (:class:`training.profile_train.TrainWorker`). The zoo module is
named by the environment variable ``PERFSEER_CAMPAIGN_ZOO`` (default
``training.zoo``) so tests can use a stand-in with the same API.
"""

from __future__ import annotations

import importlib
import json
import os
import time

ZOO_ENV = "PERFSEER_CAMPAIGN_ZOO"


def zoo(name: str | None = None):
    """The zoo module (``training.zoo``, or the stand-in named by ``PERFSEER_CAMPAIGN_ZOO``)."""
    return importlib.import_module(name or os.environ.get(ZOO_ENV) or "training.zoo")


_zoo = zoo


def export_case(config_json: str, path: str, zoo_name: str | None = None) -> dict:
    """Export one architecture (dynamic batch) to ``path``; returns path, export_s, onnx_bytes.

    Weights are written (deterministic, from the zoo): onnxruntime needs them
    to run. Raises whatever the exporter raises (the campaign records it).
    """
    zoo = _zoo(zoo_name)
    cfg = zoo.ModelConfig.from_dict(json.loads(config_json))
    t0 = time.perf_counter()
    zoo.export_onnx(cfg, path, batch=None)
    return {"path": path, "export_s": time.perf_counter() - t0,
            "onnx_bytes": os.path.getsize(path)}


def build_train_case(config: dict, batch: int):
    """``(module, inputs)`` of a zoo config at ``batch`` for a training step."""
    # lazy: export processes import this module to run export_worker_init, which
    # must set OMP_NUM_THREADS before torch is first imported (torch reads it then)
    import torch

    zoo = _zoo()
    cfg = zoo.ModelConfig.from_dict(config)
    module = zoo.build_model(cfg)
    inputs = [torch.from_numpy(a) for a in zoo.example_inputs(cfg, batch).values()]
    return module, inputs


def export_worker_init() -> None:
    """Initializer of export processes: one thread each, lower priority than the measurement.

    Keeps a pool of exporters from oversubscribing the cores (torch would
    start one thread per core in every process) and from delaying the
    measuring process's kernel launches. torch reads ``OMP_NUM_THREADS`` when
    it is first imported, which happens after this in the export itself.
    """
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    try:
        os.nice(10)
    except OSError:
        pass
    if hasattr(os, "sched_getaffinity"):  # keep the measuring core(s) quiet
        measuring = os.sched_getaffinity(0)  # inherited from the measuring parent
        others = set(range(os.cpu_count() or 1)) - measuring
        if others:
            os.sched_setaffinity(0, others)
