"""onnxruntime's real arena growth beside the simulated one, for one model.

onnxruntime logs each extension of its CPU arena (the request that did not
fit and the region it allocated) at its default logger's verbose level. This
runs the model in a child process with that log on (three runs), reads the
extensions of the first run and of the later ones (the memory-pattern block,
when no free chunk held it), and prints them beside what
:mod:`perfseer_rt.predict.ort_arena` simulates on the model's PerfGraph:
the ground truth for the simulation, region by region.

The memory-pattern block itself is read exactly by a second child
(:func:`real_block`): its session takes an arena registered with
onnxruntime's ``kSameAsRequested`` extension strategy (each region exactly
the request that did not fit), so the later runs' block never fits in a
free region and its request is always logged, even where the default
arena's doubled regions hold it silently.

    python -m training.byod.arena_log MODEL.onnx --batch 16 [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from perfseer_rt.graph import extract
from perfseer_rt.predict import ort_arena

_CHILD = """
import sys
import onnxruntime as ort
from perfseer_rt.profile.inputs import make_inputs
ort.set_default_logger_severity(0)
so = ort.SessionOptions()
so.intra_op_num_threads = 1
sess = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
feeds = make_inputs(sess, batch=int(sys.argv[2]))
for i in range(3):
    print(f"=== run {i}", file=sys.stderr, flush=True)
    sess.run(None, feeds)
"""
#: The same runs on an arena whose regions are exactly the requests
#: (``arena_extend_strategy`` 1, kSameAsRequested), shared with the session.
_CHILD_EXACT = _CHILD.replace(
    "so = ort.SessionOptions()",
    "mem = ort.OrtMemoryInfo('Cpu', ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)\n"
    "ort.create_and_register_allocator(mem, ort.OrtArenaCfg({'arena_extend_strategy': 1}))\n"
    "so = ort.SessionOptions()\n"
    "so.add_session_config_entry('session.use_env_allocators', '1')")
_REQUEST = re.compile(r"Extending BFCArena for Cpu\..*\(requested\) num_bytes: (\d+)")
_REGION = re.compile(r"Extended allocation by (\d+) bytes")
_RUN = re.compile(r"=== run (\d+)")


def real_growth(model: Path, batch: int, child: str = _CHILD) -> list[dict[str, int]]:
    """The arena's extensions while ``model`` runs three times: one
    ``{"run", "request", "region"}`` per extension (bytes)."""
    out = subprocess.run([sys.executable, "-c", child, str(model), str(batch)], capture_output=True, text=True)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"{model}: onnxruntime could not run it: {last}")
    run, request, growth = -1, 0, []
    for line in out.stderr.splitlines():
        if (m := _RUN.search(line)):
            run = int(m.group(1))
        elif (m := _REQUEST.search(line)):
            request = int(m.group(1))
        elif (m := _REGION.search(line)) and run >= 0:
            growth.append({"run": run, "request": request, "region": int(m.group(1))})
    return growth


def real_block(model: Path, batch: int) -> int | None:
    """Bytes of the memory-pattern block onnxruntime plans for ``model`` at
    ``batch`` (module doc), None when the later runs asked for none (no
    activation was traced)."""
    later = [e["request"] for e in real_growth(model, batch, _CHILD_EXACT) if e["run"] > 0]
    return later[0] if later else None


def simulated_growth(model: Path, batch: int) -> dict[str, Any]:
    """The simulation's regions of the first run, its pattern block and
    resident bytes for the same model and batch."""
    g = extract(model, batch=batch)
    plan = ort_arena.plan_buffers(g.x, g.edge_index, g.edge_attr)
    arena = ort_arena.Arena()
    at: dict[int, int] = {}
    regions: list[dict[str, int]] = []
    for _, free, j in ort_arena.events(plan):
        if plan.size[j] <= 0:
            continue
        if free:
            arena.release(at.pop(j))
            continue
        before = arena.regions()
        at[j] = arena.allocate(plan.size[j])
        regions += [{"request": int(plan.size[j]), "region": r} for r in arena.regions()[len(before):]]
    fp = ort_arena.footprint(g.x, g.edge_index, g.edge_attr)
    return {"first_run_regions": regions, "pattern_block": fp.pattern, "first_run": fp.first_run,
            "resident": fp.resident}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    real, sim = real_growth(args.model, args.batch), simulated_growth(args.model, args.batch)
    block = real_block(args.model, args.batch)
    if args.json:
        print(json.dumps({"real": real, "real_block": block, "simulated": sim}, indent=1))
        return 0
    mib = 2**20
    print("first run, regions (MiB):  real " + " ".join(f"{e['region'] / mib:g}" for e in real if e["run"] == 0)
          + "   simulated " + " ".join(f"{e['region'] / mib:g}" for e in sim["first_run_regions"]))
    later = [e for e in real if e["run"] > 0]
    print("later runs: real " + (", ".join(f"block {e['request'] / mib:.1f} MiB in a new {e['region'] / mib:g} MiB "
                                          "region" for e in later) or "the block fit the first run's regions")
          + f"; simulated block {sim['pattern_block'] / mib:.1f} MiB, resident {sim['resident'] / mib:.1f} MiB "
            f"(first run {sim['first_run'] / mib:.1f})")
    print("memory-pattern block, exact: real " + (f"{block / mib:.2f} MiB" if block else "none")
          + f", simulated {sim['pattern_block'] / mib:.2f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
