"""The measuring child process: ``python -m perfseer_rt.profile.child``.

Started by :class:`perfseer_rt.profile.worker.ProfileWorker`. It reads one
JSON request per line on stdin and writes one JSON reply per line on its
original stdout; its fd 1 and ``sys.stdout`` point at stderr, so library
prints cannot corrupt the replies.

Memory baseline: at start the child imports onnxruntime and runs one tiny
session (onnxruntime's one-time process state: thread pools, kernel
registries, allocator set-up), then releases it. Before each CPU model it
releases free heap (``malloc_trim``) and resets ``VmHWM``, and takes the
RSS then as the baseline; so a reused child and a fresh one report the same
peak for the same model.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from perfseer_rt import errors
from perfseer_rt.profile.record import failure_record
from perfseer_rt.profile.timing import MeasureSettings


def prime_onnxruntime() -> None:
    """Create and run one tiny CPU session, then drop it."""
    import numpy as np

    from perfseer_rt.profile.cuda import tiny_conv_model
    from perfseer_rt.profile.session import build_session

    handle = build_session(tiny_conv_model(), "cpu", threads=1)
    handle.session.run(None, {"x": np.ones((1, 3, 32, 32), np.float32)})
    del handle


def _child_main() -> None:
    """Child loop: answer ``measure`` requests from stdin until ``stop`` or EOF."""
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # library prints must not reach the reply channel
    sys.stdout = sys.stderr
    import onnxruntime as ort

    from perfseer_rt.profile import hostmem

    ort.set_default_logger_severity(3)
    prime_onnxruntime()
    reset_ok = hostmem.reset_hwm() and hostmem.hwm_reset_works()
    reply.write(json.dumps({"ready": True, "pid": os.getpid(), "hwm_reset": reset_ok}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("op") == "stop":
            break
        try:
            out = _dispatch(req, reset_ok)
        except errors.PerfSeerError as exc:
            out = {"user_error": type(exc).__name__, "message": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - reported to the parent as a record
            out = failure_record(f"{type(exc).__name__}: {exc}")
        reply.write(json.dumps(out, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, tuple):
        return list(obj)
    return str(obj)


def _dispatch(req: dict, reset_ok: bool) -> dict:
    from perfseer_rt.profile import hostmem

    settings = MeasureSettings.from_dict(req.get("settings"))
    shapes = req.get("input_shapes")
    if req["provider"] == "cpu":
        from perfseer_rt.profile.cpu import measure_cpu

        baseline = hostmem.start_baseline() if reset_ok else hostmem.rss_kib()
        rec = measure_cpu(req["model"], batch=req.get("batch"), input_shapes=shapes,
                          threads=req.get("threads", 1), settings=settings,
                          baseline_kib=baseline)
        if not reset_ok:
            rec["notes"].append("VmHWM reset unavailable: measured in a fresh process; "
                                "peak includes start-up")
        return rec
    if req["provider"] == "cuda":
        from perfseer_rt.profile.cuda import measure_cuda

        return measure_cuda(req["model"], batch=req.get("batch"), input_shapes=shapes,
                            settings=settings, provider_options=req.get("provider_options"),
                            device_id=req.get("device_id", 0))
    raise errors.DeviceError(f"unknown provider {req['provider']!r}; choose cpu or cuda")


if __name__ == "__main__":
    _child_main()
