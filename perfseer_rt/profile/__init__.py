"""Measure the inference of ONNX models with onnxruntime (CPU or CUDA).

The measured labels the predictors learn from. Nothing here imports torch.

- :func:`profile`: one model, one provider -> one record (dict, units in
  the field names; see :mod:`perfseer_rt.profile.record`).
- :class:`ProfileWorker`: a reusable measuring child process for campaigns.
- :func:`build_session`: the one place onnxruntime sessions are built; it
  reports the provider actually used.
- :func:`make_inputs` / :func:`resolve_shapes`: feeds from the signature.
- :func:`environment`: the environment block of a record.

Each name is imported from its module on first use (PEP 562): a prediction
reads this machine's CPU from :mod:`perfseer_rt.profile.env` and builds its
session with :mod:`perfseer_rt.profile.session` without loading the
profiler's worker, timing and CUDA code (tests/test_cli_imports.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfseer_rt.profile.api import check_cuda, finish_record, profile
    from perfseer_rt.profile.env import environment
    from perfseer_rt.profile.inputs import make_inputs, resolve_shapes
    from perfseer_rt.profile.record import RECORD_FIELDS, STATUSES, classify_failure
    from perfseer_rt.profile.session import PROVIDERS, SessionHandle, build_session
    from perfseer_rt.profile.timing import PRESETS, MeasureSettings, latency_stats
    from perfseer_rt.profile.worker import ProfileWorker

#: each public name -> the module that defines it
_HOMES = {
    "check_cuda": "api", "finish_record": "api", "profile": "api",
    "environment": "env",
    "make_inputs": "inputs", "resolve_shapes": "inputs",
    "RECORD_FIELDS": "record", "STATUSES": "record", "classify_failure": "record",
    "PROVIDERS": "session", "SessionHandle": "session", "build_session": "session",
    "PRESETS": "timing", "MeasureSettings": "timing", "latency_stats": "timing",
    "ProfileWorker": "worker",
}

__all__ = [
    "PRESETS", "PROVIDERS", "RECORD_FIELDS", "STATUSES", "MeasureSettings", "ProfileWorker",
    "SessionHandle", "build_session", "check_cuda", "classify_failure", "environment",
    "finish_record", "latency_stats", "make_inputs", "profile", "resolve_shapes",
]


def __getattr__(name: str) -> Any:
    """A public name of :data:`__all__`, from its module imported now."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'perfseer_rt.profile' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"perfseer_rt.profile.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
