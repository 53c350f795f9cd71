"""Measure the inference of ONNX models with onnxruntime (CPU or CUDA).

The measured labels the predictors learn from. Nothing here imports torch.

- :func:`profile`: one model, one provider -> one record (dict, units in
  the field names; see :mod:`perfseer_rt.profile.record`).
- :class:`ProfileWorker`: a reusable measuring child process for campaigns.
- :func:`build_session`: the one place onnxruntime sessions are built; it
  reports the provider actually used.
- :func:`make_inputs` / :func:`resolve_shapes`: feeds from the signature.
- :func:`environment`: the environment block of a record.
"""

from perfseer_rt.profile.api import check_cuda, finish_record, profile
from perfseer_rt.profile.env import environment
from perfseer_rt.profile.inputs import make_inputs, resolve_shapes
from perfseer_rt.profile.record import RECORD_FIELDS, STATUSES, classify_failure
from perfseer_rt.profile.session import PROVIDERS, SessionHandle, build_session
from perfseer_rt.profile.timing import PRESETS, MeasureSettings, latency_stats
from perfseer_rt.profile.worker import ProfileWorker

__all__ = [
    "PRESETS", "PROVIDERS", "RECORD_FIELDS", "STATUSES", "MeasureSettings", "ProfileWorker",
    "SessionHandle", "build_session", "check_cuda", "classify_failure", "environment",
    "finish_record", "latency_stats", "make_inputs", "profile", "resolve_shapes",
]
