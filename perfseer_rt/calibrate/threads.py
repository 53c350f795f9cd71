"""A CPU device is a CPU model and an onnxruntime intra-op thread count.

``perfseer-rt calibrate --threads N`` measures at ``N`` threads; its default
is the count onnxruntime itself uses when a session sets none
(:func:`onnxruntime_default_threads`): onnxruntime spawns one worker
thread fewer than that count (the calling thread is the last one), so the
count is read off the threads a default session adds to this process.
onnxruntime does not follow the process's CPU affinity: under ``taskset``
it still starts a thread per core it counts.

Counts above the CPUs this machine shows are refused
(:func:`check_threads`): threads sharing a CPU measure contention, not
the count. Each count is its own device: an entry calibrated at N threads
predicts at N threads only (``predict --device local-cpu-Nt``); a count
never calibrated has no device and is not extrapolated.
"""

from __future__ import annotations

import os

import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from perfseer_rt.errors import PerfSeerError


def _thread_count() -> int | None:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def onnxruntime_default_threads() -> int:
    """The intra-op thread count of a session created with onnxruntime's
    defaults on this machine (the threads it adds, plus the caller's);
    ``os.cpu_count()`` where threads cannot be counted (no ``/proc``)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    before = _thread_count()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    after = _thread_count()
    del sess
    if before is None or after is None:
        return max(1, os.cpu_count() or 1)
    return max(1, after - before + 1)


def check_threads(threads: int) -> int:
    """``threads`` if this machine can run that many at once.

    Raises:
        PerfSeerError: below 1, or above the CPUs of this machine.
    """
    cpus = os.cpu_count() or 1
    if threads < 1 or threads > cpus:
        raise PerfSeerError(f"--threads {threads}: this machine shows {cpus} CPU(s); calibrate at 1..{cpus} "
                            "threads (more threads than CPUs would measure contention, not the count)")
    return threads
