"""onnxruntime's own allocation plan and memory pattern, replayed on the graph onnxruntime runs.

The ground truth for :mod:`perfseer_rt.predict.ort_arena`, which simulates
the same from a PerfGraph (the exported graph). Here the graph is the one
onnxruntime's CPU provider builds (``ORT_ENABLE_ALL``: constant folding,
Conv+BatchNormalization+activation fusions, the blocked NCHWc layout with
its ReorderInput / ReorderOutput nodes, BiasGelu, FusedMatMul, ...), saved
with ``optimized_model_filepath``, and every value's size is the one a real
run gives it (the optimized graph run once with every value as an output).
The plan follows onnxruntime's ``allocation_planner.cc`` (sequential
execution, ``ComputeSingleStreamReusePlan``) and ``mem_pattern_planner.h``:

1. A graph output gets a buffer of its own, outside the pattern.
2. A view (:data:`ALIAS`: Reshape, Squeeze, Unsqueeze, Flatten, Identity,
   Dropout) is its input's buffer.
3. An operator registered ``MayInplace`` (:data:`MAY_INPLACE`: the unary
   activations and Softmax, Cast; the blocked convolution and FusedConv on
   their "Sum" input, index 3) writes into that input's buffer when this
   node is the input's last use and the sizes match.
4. Otherwise the output takes a dead buffer of the same shape and element
   size (``FindReusableTensor``): the most recently freed first; the buffer
   then lives until the last use of every value that shares it, which can
   raise the peak (a buffer taken late keeps its first owner's slot).
5. Otherwise it is allocated. After each node, the buffers whose values are
   all used go to the front of the free list.

The memory-pattern block is :class:`MemPatternPlanner`'s: each allocation
at the start of the tightest gap between the live blocks (sorted by
offset) that holds it, else after the last live block; its size is the
largest end. At batch 16 it equals onnxruntime's own block to the byte on
28 of 43 real models (ConvNeXt-V1, ResNet, RepVGG, RepViT, MobileOne, HGNet
and VoVNet among them; ``reports/cpu-calibrate``), the real one read
by :func:`training.byod.arena_log.real_block`. Where onnxruntime's graph has
shapes its inference cannot name (a Reshape whose target is computed from
``Shape``: transformers, ECA / global-context modules), it cannot reuse by
shape, and the plan here, which knows every size, reuses more than it does.

    python -m training.byod.ort_plan MODEL.onnx --batch 16 [--json]
    python -m training.byod.ort_plan --measured ROWS.jsonl --work W [--out FILE.json]

The first prints the planned block, onnxruntime's real one and the block
:mod:`perfseer_rt.predict.ort_arena` simulates on the model's PerfGraph:
the distance the simulation has left to go, model by model. The second
plans every model of ``training.byod.cpu_check`` rows (exported into
``W``) and prints the measured run phase (``run_peak_mb - loaded_mb``, one
thread) over the replay's resident arena (:func:`resident`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from perfseer_rt.graph import extract
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict import ort_arena
from perfseer_rt.profile.inputs import make_inputs
from training.byod.arena_log import real_block

#: Operators whose output is their first input's buffer (kernel ``Alias(0, 0)``).
ALIAS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout"})
#: ``op type -> inputs`` the CPU kernel may write its output into (``MayInplace(i, 0)``).
MAY_INPLACE: dict[str, tuple[int, ...]] = {
    **{op: (0,) for op in ("Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "Elu", "Selu",
                           "ThresholdedRelu", "Softplus", "Softsign", "Softmax", "Cast")},
    "Conv@com.microsoft.nchwc": (3,), "FusedConv@com.microsoft": (3,)}


@dataclass(frozen=True)
class Plan:
    """The buffers of one run (:class:`perfseer_rt.predict.ort_arena.Buffers`:
    bytes, rounded up to onnxruntime's allocation alignment
    (:data:`perfseer_rt.predict.ort_arena.PATTERN_ALIGN`); alive from the node
    that allocates each through its last reader, in allocation order), the graph outputs'
    bytes (allocated outside the pattern; not in ``buffers``) and the
    memory-pattern block (:func:`perfseer_rt.predict.ort_arena.pattern_block`
    of ``buffers``), bytes."""

    buffers: ort_arena.Buffers
    outputs: list[int]
    block: int


def optimized(model: Path, out: Path) -> onnx.ModelProto:
    """The graph onnxruntime's CPU provider runs for ``model`` (one thread,
    every optimization), saved to ``out`` and loaded."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    so.optimized_model_filepath = str(out)
    ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    return onnx.load(str(out))


def value_bytes(m: onnx.ModelProto, batch: int) -> dict[str, tuple[tuple[int, ...], int, int]]:
    """``value -> (shape, element size, bytes)`` of every node output of the
    optimized graph ``m`` in a real run at ``batch`` (the graph run once,
    unoptimized, with every value as an output)."""
    m = onnx.ModelProto.FromString(m.SerializeToString())
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in have:
                m.graph.output.append(helper.make_empty_tensor_value_info(o))
                have.add(o)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    values = sess.run(names, make_inputs(sess, batch=batch))
    return {n: (tuple(v.shape), v.dtype.itemsize, int(v.nbytes)) for n, v in zip(names, values)
            if isinstance(v, np.ndarray)}


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ort_arena.PATTERN_ALIGN) * ort_arena.PATTERN_ALIGN


def plan(m: onnx.ModelProto, sizes: dict[str, tuple[tuple[int, ...], int, int]]) -> Plan:
    """onnxruntime's plan and memory pattern of the optimized graph ``m``
    with the values' real ``sizes`` (module doc)."""
    g = m.graph
    fixed = {i.name for i in g.input} | {i.name for i in g.initializer}
    outputs = {o.name for o in g.output}
    uses: Counter = Counter(i for n in g.node for i in n.input if i)
    buf: dict[str, str] = {}      # value -> buffer (the value that allocated it)
    left: Counter = Counter()     # buffer -> uses left over every value sharing it
    owned: set[str] = set()       # buffers this plan allocates
    freelist: list[str] = []
    allocated_at: list[tuple[int, str]] = []
    out_bytes: list[int] = []
    for k, n in enumerate(g.node):
        inplace = MAY_INPLACE.get(n.op_type if n.domain in ("", "ai.onnx") else f"{n.op_type}@{n.domain}", ())
        for o in n.output:
            if not o or o not in sizes:
                continue
            if o in outputs:
                out_bytes.append(_aligned(sizes[o][2]))
                continue
            if n.op_type in ALIAS and n.input and n.input[0] in fixed:
                continue  # a view of a graph input or an initializer: nothing allocated
            b = None
            if n.op_type in ALIAS and n.input and n.input[0] in buf:
                b = buf[n.input[0]]
            for i in inplace:
                src = n.input[i] if len(n.input) > i else ""
                if b is None and src in buf and src not in fixed and left[buf[src]] == 1 \
                        and sizes[src][2] == sizes[o][2]:
                    b = buf[src]
            if b is None:
                key = sizes[o][:2]
                b = next((f for f in freelist if sizes[f][:2] == key), None)
                if b is not None:
                    freelist.remove(b)
            if b is None:
                b = o
                owned.add(o)
                allocated_at.append((k, o))
            buf[o] = b
            left[b] += uses[o]
        for i in n.input:
            if i in buf and i not in fixed:
                left[buf[i]] -= 1
        for v in [*n.input, *n.output]:
            b = buf.get(v)
            if b in owned and left[b] == 0 and b not in freelist:
                freelist.insert(0, b)
    last: dict[str, int] = {}
    for k, n in enumerate(g.node):
        for i in n.input:
            if i in buf and buf[i] in owned:
                last[buf[i]] = k
    buffers = ort_arena.Buffers(
        size=np.array([_aligned(sizes[b][2]) for _, b in allocated_at], dtype=np.float64),
        start=np.array([k for k, _ in allocated_at], dtype=np.int64),
        end=np.array([last.get(b, len(g.node)) for _, b in allocated_at], dtype=np.int64), nodes=len(g.node))
    return Plan(buffers, out_bytes, int(ort_arena.pattern_block(buffers)))


def resident(p: Plan) -> float:
    """Bytes the arena holds after the plan's first run and the block taken
    from it (:func:`perfseer_rt.predict.ort_arena.replay`; the graph outputs,
    allocated outside the block, are not counted)."""
    return ort_arena.replay(p.buffers).resident


def measured_ratios(rows: Path, work: Path) -> list[dict[str, Any]]:
    """Per measured one-thread configuration: the measured run phase (MiB),
    the replay's resident arena (MiB) and their ratio."""
    # lazy: the zoo's exporter (torch) is needed only here
    from training.byod.cpu_check import one_thread_values
    from training.seernet.user_check import exported

    out = []
    for (spec, batch), v in sorted(one_thread_values(rows, ("run_peak_mb", "loaded_mb")).items()):
        run = float(np.median(v["run_peak_mb"]) - np.median(v["loaded_mb"]))
        held = resident(of_model(exported(spec, work), batch)) / 2**20
        out.append({"spec": spec, "batch": batch, "run_phase_mb": run, "replay_resident_mb": held,
                    "ratio": run / held if held else None})
    return out


def of_model(model: Path, batch: int) -> Plan:
    """:func:`plan` of ``model`` at ``batch`` (onnxruntime optimizes it in a temp folder)."""
    with tempfile.TemporaryDirectory(prefix="psrt-ort-plan-") as tmp:
        m = optimized(model, Path(tmp) / "optimized.onnx")
        return plan(m, value_bytes(m, batch))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", type=Path, nargs="?")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--measured", type=Path, help="training.byod.cpu_check rows: ratios for every model")
    ap.add_argument("--work", type=Path, help="with --measured: the exported models")
    ap.add_argument("--out", type=Path, help="with --measured: write the ratios as JSON")
    args = ap.parse_args(argv)
    if args.measured is not None:
        if args.work is None:
            ap.error("--measured needs --work")
        ratios = measured_ratios(args.measured, args.work)
        for r in ratios:
            print(f"{r['spec'][:48]:48s} batch {r['batch']:3d}: run phase {r['run_phase_mb']:8.1f} MiB, "
                  f"replay {r['replay_resident_mb']:8.1f} MiB, ratio {r['ratio']:.3f}")
        if args.out is not None:
            atomic_write_bytes(args.out, (json.dumps(ratios, indent=1) + "\n").encode())
        return 0
    if args.model is None:
        ap.error("give a MODEL or --measured")
    real_b = real_block(args.model, args.batch)  # runs in a child of its own
    p = of_model(args.model, args.batch)
    g = extract(args.model, batch=args.batch)
    simulated = ort_arena.footprint(g.x, g.edge_index, g.edge_attr).pattern
    doc: dict[str, Any] = {"planned_block": p.block, "real_block": real_b, "simulated_block": simulated,
                           "allocations": len(p.buffers.size),
                           "graph_output_bytes": sum(p.outputs)}
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        mib = 2**20
        print(f"memory-pattern block: planned {p.block / mib:.2f} MiB ({doc['allocations']} allocations), real "
              + (f"{real_b / mib:.2f} MiB" if real_b else "none")
              + f"; simulated on the PerfGraph (perfseer_rt.predict.ort_arena) {simulated / mib:.2f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
