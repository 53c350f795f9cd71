"""The checks ``python -m benchmarks.real_exports`` applies to each exported
model, and the rows it reports them in (shared with ``classic_exports``,
``timm_exports``, ``diffusers_exports`` and ``bundled_models``).

* :func:`timed_extract`: extract, with node count, unknown ops, GFLOPs and
  extraction CPU time in milliseconds.
* :func:`bound_check`: every edge tensor's extracted shape against
  onnxruntime's run: equal, above it where the size depends on the data,
  or a mismatch.
* :func:`attempt` / :func:`exported`: a check's error recorded in its row; an
  export's error recorded as the toolchain's (``_export_error``), not a
  failure.
* :func:`failures`, :func:`checked_rows`, :func:`emit`: what fails a row, and
  the JSON lines written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from perfseer_rt import extract
from perfseer_rt.graph import data_dependent, layout
from perfseer_rt.graph.perfgraph import PerfGraph
from tests.contrib_models import run_shapes

FLOPS = layout.NODE_COLUMNS.index("flops")
#: Largest relative FLOPs difference from the peer export that passes.
FLOPS_TOLERANCE = 0.02


def summary(g: PerfGraph, seconds: float) -> dict:
    return {"nodes": g.num_nodes, "unknown": sorted(set(g.unknown_ops)),
            "gflops": float(g.x[:, FLOPS].sum()) / 1e9, "extract_ms": round(seconds * 1e3, 1),
            "exporter": g.info["exporter"]}


def timed_extract(path: Path, **kw) -> dict:
    t = time.process_time()
    g = extract(path, **kw)
    return summary(g, time.process_time() - t)


class ExportFailed(Exception):
    """The toolchain could not write the model (its limit, not the extractor's)."""


def exported(fn: Callable[[], object]) -> None:
    """Run an export step; its failure becomes :class:`ExportFailed`."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - reported as the toolchain's
        raise ExportFailed(f"{type(exc).__name__}: {exc}"[:400]) from exc


def attempt(row: dict, key: str, fn: Callable[[], dict]) -> None:
    """``row[key] = fn()``, or the error in ``row[key + "_error"]``
    (``_export_error`` where the toolchain failed: reported, not a failure)."""
    try:
        row[key] = fn()
    except ExportFailed as exc:
        row[key + "_export_error"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - a finding to report, not to stop on
        row[key + "_error"] = f"{type(exc).__name__}: {exc}"[:400]


def compare(row: dict, key: str, peer: str) -> None:
    if key in row and peer in row and row[peer]["gflops"]:
        row[f"{key}_flops_ratio"] = round(row[key]["gflops"] / row[peer]["gflops"], 4)


def extracting(export: Callable[[], object], path: Path, **kw) -> dict:
    """Export (:func:`exported`), then extract ``path``."""
    exported(export)
    return timed_extract(path, **kw)


def bound_check(path: Path, image: np.ndarray | None = None, batch: int | None = None,
                dims: dict[str, int] | None = None, ids: int | None = None,
                chunk: int | None = None,
                feeds_for: Callable[[PerfGraph, onnx.ModelProto], dict] | None = None,
                input_shapes: dict[str, tuple[int, ...]] | None = None) -> dict:
    """Extract ``path`` (at ``batch``, ``dims`` and ``input_shapes``) and compare every edge
    tensor's shape with onnxruntime's on ``image`` (default: ``feeds_for``'s
    inputs for the extracted graph, else random inputs of the shapes
    extracted, floats, or token ids below ``ids`` for integer inputs):
    exact, above (an assumed bound) or not. Tensors downstream of a NonZero
    taken as MoE routing are estimates: below passes there, and the routed
    totals are compared instead."""
    t = time.process_time()
    g = extract(path, batch=batch, dims=dims, input_shapes=input_shapes)
    out = summary(g, time.process_time() - t)
    proto = onnx.load(str(path))
    ort.set_default_logger_severity(3)  # Mask R-CNN's loop warns once per detection
    rng = np.random.default_rng(0)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in proto.graph.input}
    feeds = {proto.graph.input[0].name: image} if image is not None else feeds_for(
        g, proto) if feeds_for is not None else {
        name: rng.integers(0, ids or 1, shape).astype(onnx.helper.tensor_dtype_to_np_dtype(
            types[name])) if types[name] in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
        else rng.random(shape, dtype=np.float32) for name, shape in g.input_shapes.items()}
    ran = {n: tuple(s) for n, s in run_shapes(proto, feeds, chunk).items()}
    ours = {t: tuple(s) for t, s in zip(g.edge_tensors, g.edge_shapes) if t in ran}
    above = [t for t, s in ours.items() if s != ran[t] and len(s) == len(ran[t])
             and all(a >= b for a, b in zip(s, ran[t]))]
    routed, totals = _routed(proto, ours, ran)
    estimated = [t for t, s in ours.items() if s != ran[t] and t not in above and t in routed
                 and len(s) == len(ran[t])]
    out["shapes_checked"] = len(ours)
    out["shapes_exact"] = sum(s == ran[t] for t, s in ours.items())
    out["shapes_above"] = len(above)
    if routed:
        out["shapes_routed_below"] = len(estimated)
        out["routed_totals"] = totals
        out["routed_total_mismatches"] = [k for k, (a, b) in totals.items() if a != b]
    out["shape_mismatches"] = [f"{t}: {list(s)} vs {list(ran[t])}" for t, s in ours.items()
                               if s != ran[t] and t not in above and t not in estimated][:5]
    out["warnings"] = [w for w in g.warnings if "depend on the data" in w or "node '" in w
                       or "mixture-of-experts" in w]
    return out


def _routed(proto: onnx.ModelProto, ours: dict, ran: dict
            ) -> tuple[set[str], dict[str, tuple[int, int]]]:
    """The tensors downstream of a NonZero that extraction takes as MoE
    routing (:func:`data_dependent.routing_source`), and per routing mask
    the routed token slots summed over its experts, (ours, onnxruntime's)."""
    producers = {o: n for n in proto.graph.node for o in n.output if o}
    roots: dict[str, str] = {}
    for n in proto.graph.node:
        if n.op_type == "NonZero" and n.input:
            src = data_dependent.routing_source(n.input[0], producers)
            if src is not None:
                roots[n.output[0]] = src.output[0]
    groups = data_dependent.routing_groups(proto.graph.node, producers)
    totals: dict[str, tuple[int, int]] = {}
    for o, mask in roots.items():
        if groups.get(mask, 0) >= 2 and o in ours and o in ran:
            a, b = totals.get(mask, (0, 0))
            totals[mask] = (a + ours[o][1], b + ran[o][1])
    down = set(roots)
    for n in proto.graph.node:  # graph order is topological
        if any(i in down for i in n.input):
            down.update(o for o in n.output if o)
    return (down if totals else set()), totals



def refused_by_onnxruntime(path: Path) -> None:
    """ExportFailed where onnxruntime cannot load the converted file."""
    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - the converter wrote an invalid model
        raise ExportFailed(f"onnxruntime refuses the converted model: {exc}"[:400]) from exc



def failures(row: dict) -> list[str]:
    """What fails the checks in one row."""
    out = [k for k in row if k.endswith("_error") and not k.endswith("_export_error")]
    for k, v in row.items():
        if isinstance(v, dict):
            out += [f"{k}: unknown {v['unknown']}"] if v.get("unknown") else []
            out += [f"{k}: shapes {v['shape_mismatches']}"] if v.get("shape_mismatches") else []
            out += [f"{k}: routed totals {v['routed_total_mismatches']}"] \
                if v.get("routed_total_mismatches") else []
        elif k.endswith("_flops_ratio") and abs(v - 1) > FLOPS_TOLERANCE:
            out.append(f"{k} {v}")
    return out


def checked_rows(rows: Iterable[tuple[dict, Callable[[], dict]]], out: Path | None) -> int:
    """For each ``(row, check)``: the check's result (or its error) in
    ``row["check"]``, the row emitted; then a summary line of what failed.
    Returns the exit code (1 when anything failed)."""
    failed, n = [], 0
    for row, check in rows:
        attempt(row, "check", check)
        emit(row, out)
        n += 1
        label = " ".join(str(row[k]) for k in ("model", "exporter", "opset") if k in row)
        failed += [f"{label}: {f}" for f in failures(row) + failures(row.get("check", {}))]
    print(json.dumps({"rows": n, "failed": failed}))
    return 1 if failed else 0


def emit(row: dict, out: Path | None) -> None:
    """Print one row as a JSON line, and append it to ``out`` when given."""
    line = json.dumps(row)
    print(line, flush=True)
    if out:
        with out.open("a") as f:
            f.write(line + "\n")
