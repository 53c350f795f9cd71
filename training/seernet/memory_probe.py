"""Where the CPU run-phase memory comes from: one ONNX model run in this
process with onnxruntime's memory pattern and CPU arena on or off.

    python -m training.seernet.memory_probe MODEL.onnx --batch 16 [--no-pattern] [--no-arena]

Prints JSON: the peak resident memory (VmHWM, MiB) over the RSS after the
session is created, after the first run and after three runs. Run one
setting per process (the high-water mark is reset once, after session
creation, through ``/proc/self/clear_refs``; Linux only). On 2026-11-24 it found
with it that, with the defaults, the second run allocates the recorded
memory pattern as one more block on top of the arena the first run filled
(``reports/cpu-amd-epyc-1t/README.md``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

import numpy as np


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def probe(model: str, batch: int, pattern: bool = True, arena: bool = True, runs: int = 3,
          size: int = 224) -> dict[str, float]:
    """MiB over the post-load RSS after the first run and after ``runs`` runs
    (symbolic non-batch input dims take ``size``)."""
    import onnxruntime as ort  # deliberately lazy: an install without it can still import this module

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.enable_mem_pattern = pattern
    so.enable_cpu_mem_arena = arena
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    base = _status_mib("VmRSS")
    inp = sess.get_inputs()[0]
    shape = [batch] + [d if isinstance(d, int) else size for d in inp.shape[1:]]
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    first = 0.0
    for k in range(runs):
        sess.run(None, {inp.name: x})
        if k == 0:
            first = _status_mib("VmHWM") - base
    return {"first_run_mib": round(first, 1), f"after_{runs}_runs_mib": round(_status_mib("VmHWM") - base, 1)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.seernet.memory_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--no-pattern", action="store_true", help="enable_mem_pattern = False")
    ap.add_argument("--no-arena", action="store_true", help="enable_cpu_mem_arena = False")
    a = ap.parse_args(argv)
    print(json.dumps(probe(a.model, a.batch, not a.no_pattern, not a.no_arena)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
