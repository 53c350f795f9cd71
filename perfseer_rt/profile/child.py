"""The measuring child process: ``python -m perfseer_rt.profile.child``.

Started by :class:`perfseer_rt.profile.worker.ProfileWorker`. It reads one
JSON request per line on stdin and writes one JSON reply per line on its
original stdout; its fd 1 and ``sys.stdout`` point at stderr, so library
prints cannot corrupt the replies.

Memory baseline: at start the child imports onnxruntime and runs one tiny
session (onnxruntime's one-time process state: thread pools, kernel
registries, allocator set-up), then releases it; glibc's mmap threshold is
fixed before that (:func:`perfseer_rt.profile.hostmem.fix_mmap_threshold`).
Before each CPU model it releases free heap (``malloc_trim``), resets
``VmHWM``, and takes the RSS then as the baseline. A reused child still reads
more for small models than a fresh one (:mod:`perfseer_rt.profile.hostmem`),
so each record's ``peak_mem_method`` says which it was (``+fresh`` for the
first CPU model of the child).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfseer_rt import errors
from perfseer_rt.profile import hostmem
from perfseer_rt.profile.cpu import measure_cpu
from perfseer_rt.profile.cuda import measure_cuda, tiny_conv_model
from perfseer_rt.profile.session import build_session
from perfseer_rt.profile.timing import MeasureSettings
from perfseer_rt.profile.worker import serve

_state: dict[str, Any] = {"hwm_reset": False, "cpu_measured": 0}


def prime_onnxruntime() -> None:
    """Create and run one tiny CPU session, then drop it."""
    handle = build_session(tiny_conv_model(), "cpu", threads=1)
    handle.session.run(None, {"x": np.ones((1, 3, 32, 32), np.float32)})
    del handle


def _hello() -> dict[str, Any]:
    import onnxruntime as ort  # deliberately lazy: onnxruntime is optional for graph-only use (perfseer_rt.install)

    ort.set_default_logger_severity(3)
    hostmem.fix_mmap_threshold()  # steady peaks (hostmem's module doc); before any baseline
    prime_onnxruntime()
    return {"hwm_reset": hostmem.reset_hwm() and hostmem.hwm_reset_works()}


def _dispatch(req: dict[str, Any]) -> dict[str, Any]:
    reset_ok = _state["hwm_reset"]
    settings = MeasureSettings.from_dict(req.get("settings"))
    shapes = req.get("input_shapes")
    if req["provider"] == "cpu":
        baseline = hostmem.start_baseline() if reset_ok else hostmem.rss_kib()
        rec = measure_cpu(req["model"], batch=req.get("batch"), input_shapes=shapes,
                          threads=req.get("threads", 1), settings=settings,
                          baseline_kib=baseline, fresh_process=_state["cpu_measured"] == 0)
        _state["cpu_measured"] += 1
        if not reset_ok:
            rec["notes"].append("VmHWM reset unavailable: measured in a fresh process; "
                                "peak includes start-up")
        return rec
    if req["provider"] == "cuda":
        return measure_cuda(req["model"], batch=req.get("batch"), input_shapes=shapes,
                            settings=settings, provider_options=req.get("provider_options"),
                            device_id=req.get("device_id", 0))
    raise errors.DeviceError(f"unknown provider {req['provider']!r}; choose cpu or cuda")


def main() -> None:
    def hello() -> dict[str, Any]:
        _state.update(_hello())
        return dict(_state)

    serve(_dispatch, hello)


if __name__ == "__main__":
    main()
