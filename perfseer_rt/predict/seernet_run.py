"""Running the exported SeerNet predictors (kind ``seernet``): many models'
PerfGraphs go through the predictor together, concatenated into disjoint
graphs (the exported predictor's contract, see ``training/seernet/export.py``),
:data:`CHUNK_NODES` nodes or so per onnxruntime call; the outputs as the
device reports them (field scale, calibration, memory phases), intervals and
the predictor's domain warnings.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np

from perfseer_rt.errors import MetricError, PerfSeerError
from perfseer_rt.graph import PerfGraph, layout
from perfseer_rt.graph.ops import cost_kind
from perfseer_rt.predict import uncertainty
from perfseer_rt.predict.correction import Correction
from perfseer_rt.predict.manifest import OUTPUT_NAMES, FieldScale, MemoryParts, Uncertainty, concat_graphs
from perfseer_rt.predict.registry import Predictor

#: Nodes per onnxruntime call when many graphs are predicted together. The
#: predictor's intermediates are ``[nodes, 256]`` float32 (1 KiB per node), so
#: a few hundred nodes keep them near the core's cache: over 200 NAS-Bench-201
#: graphs (24,508 nodes) on one core, calls of 500..4,000 nodes ran at
#: 1,250..1,330 graphs/s on the AMD EPYC (one call of all: ~940); on the Intel
#: Xeon (family 6 model 167) calls of 384..768 nodes ran at ~800 graphs/s, 2,048 at
#: ~705, 256 at ~715 (the default blend, 3 rounds). A graph larger
#: than this goes alone. Each graph's prediction depends on that graph only:
#: chunking changes speed, and results only in the last float32 bit (GEMM
#: blocking; 2.4e-7 relative at most over those graphs).
CHUNK_NODES = 768


@lru_cache(maxsize=8)
def _session(path: str, threads: int) -> Any:
    # deliberately lazy: onnxruntime may be missing (an install without it); checked first
    from perfseer_rt.install import check_onnxruntime
    from perfseer_rt.profile.session import build_session

    check_onnxruntime()
    return build_session(path, "cpu", threads=threads).session


def concat(graphs: Sequence[PerfGraph], num_globals: int | None = None) -> dict[str, np.ndarray]:
    """The predictor's inputs for many graphs (:func:`manifest.concat_graphs`);
    ``num_globals``: the first so many globals (a predictor of an older
    layout, :data:`perfseer_rt.graph.layout.GLOBAL_COLUMNS_OF`), default all."""
    return concat_graphs([g.x for g in graphs], [g.edge_index for g in graphs],
                         [g.edge_attr for g in graphs], [g.u[:num_globals] for g in graphs])


def chunks(graphs: Sequence[PerfGraph], max_nodes: int = CHUNK_NODES) -> list[Sequence[PerfGraph]]:
    """Consecutive runs of ``graphs`` with at most ``max_nodes`` nodes in all
    (a larger graph forms a run of its own)."""
    runs, start, nodes = [], 0, 0
    for i, g in enumerate(graphs):
        if i > start and nodes + g.num_nodes > max_nodes:
            runs.append(graphs[start:i])
            start, nodes = i, 0
        nodes += g.num_nodes
    return runs + [graphs[start:]] if len(graphs) else runs


def run_outputs(pred: Predictor, graphs: Sequence[PerfGraph], model: str | None = None,
                outputs: Sequence[str] = OUTPUT_NAMES, chunk_nodes: int = CHUNK_NODES) -> list[np.ndarray]:
    """The ONNX ``outputs`` of ``model`` (default: the device's default model),
    each ``[G, M]`` in the manifest's metric order, ``chunk_nodes`` nodes or
    so per onnxruntime call.

    Raises:
        PerfSeerError: the model's ONNX file has no output of one of those names.
    """
    sess = _session(str(pred.model_file(model)), pred.threads)
    have = {o.name for o in sess.get_outputs()}
    if not set(outputs) <= have:
        raise PerfSeerError(f"{pred.model_file(model)}: no output {sorted(set(outputs) - have)[0]!r}; "
                            "the manifest and the ONNX file differ (reinstall the predictor)")
    n_glob = len(layout.GLOBAL_COLUMNS_OF[pred.manifest["feature_version"]])
    runs = [sess.run(list(outputs), concat(part, n_glob)) for part in chunks(graphs, chunk_nodes)]
    return [np.concatenate([r[k] for r in runs]) if runs else np.zeros((0, len(pred.outputs)), np.float32)
            for k in range(len(outputs))]


def run_predictor(pred: Predictor, graphs: Sequence[PerfGraph], model: str | None = None,
                  chunk_nodes: int = CHUNK_NODES) -> np.ndarray:
    """Raw output ``y`` ``[G, M]`` of ``model`` (:func:`run_outputs`)."""
    return run_outputs(pred, graphs, model, OUTPUT_NAMES, chunk_nodes)[0]


def run_with_gaps(pred: Predictor, graphs: Sequence[PerfGraph],
                  model: str | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """``(y, gap)`` of ``model``: ``gap`` ``[G, M]`` is the blend's
    disagreement output where the manifest names one for this model (the
    one its intervals and warning were calibrated for), else None."""
    unc = pred.uncertainty
    dis = unc.disagreement if unc is not None else None
    if dis is None or (model or pred.default_model) != dis.model:
        return run_predictor(pred, graphs, model), None
    y, gap = run_outputs(pred, graphs, model, (OUTPUT_NAMES[0], dis.output))
    return y, gap


def external_weights_mb(graphs: Sequence[PerfGraph]) -> np.ndarray:
    """MiB of each graph's weights stored in external data files beside the
    model (``PerfGraph.info["external_weight_share"]`` of its weights)."""
    return np.array([float(g.info.get("external_weight_share", 0.0)) *
                     float(g.globals["weight_total"]) / 2**20 for g in graphs])


def reported(pred: Predictor, values: np.ndarray, external_mb: np.ndarray | None = None,
             graphs: Sequence[PerfGraph] | None = None, simulate_run: bool = True) -> np.ndarray:
    """Raw outputs ``[G, M]`` of ``pred``'s model as the device reports them:
    the shipped field scale applied, then a calibrated entry's corrections
    (each metric's; the peak-memory one to both memory phases too, so the
    parts stay consistent with the peak), then the session-creation phase
    less the weights stored as external data (``external_mb`` [G], MiB: the
    predictors learned models whose file, weights included, is read into
    memory while the session is created; onnxruntime holds no such copy of
    external weights: reports/cpu-amd-epyc-1t/model_kinds.md), then peak memory =
    max(session creation, inference) where the manifest combines them so. A
    calibration fits its corrections on the quantity before them (the base
    entry as it reports), so fit and use agree. ``graphs``: the graphs of
    the rows, for a correction per kind of work
    (:meth:`~perfseer_rt.predict.correction.Correction.apply`), and for the
    run phase where the device simulates it (``run_memory.json``,
    :mod:`perfseer_rt.predict.run_memory`: it replaces the model's run-phase
    output before everything else; ``simulate_run=False`` keeps the model's)."""
    values = np.array(values, dtype=np.float64)
    col = {name: j for j, name in enumerate(pred.outputs)}
    mem = pred.memory  # kept only where the peak is the max of two phases the model outputs
    if mem is not None and not (mem.combine == "max" and {mem.peak, mem.load, mem.run} <= col.keys()):
        mem = None
    run_memory = pred.run_memory
    if mem is not None and run_memory is not None and graphs is not None and simulate_run:
        values[:, col[mem.run]] = run_memory.run_phase_mb(graphs)
    adjustments: list[Mapping[str, FieldScale | Correction]] = [pred.field_scale, pred.corrections]
    for adjust in adjustments:
        for name, how in adjust.items():
            phases = [mem.load, mem.run] if mem is not None and name == mem.peak else []
            for t in [name] + [ph for ph in phases if ph not in adjust]:  # a phase's own entry wins
                if t in col:
                    values[:, col[t]] = how.apply(values[:, col[t]], graphs) if isinstance(how, Correction) \
                        else how.apply(values[:, col[t]])
    if mem is not None:
        if external_mb is not None:
            load = values[:, col[mem.load]]
            values[:, col[mem.load]] = np.maximum(load - external_mb, 0.0)
        values[:, col[mem.peak]] = np.maximum(values[:, col[mem.load]], values[:, col[mem.run]])
    return values


def corrected_by(pred: Predictor) -> dict[str, Correction]:
    """The correction each output is scaled with in :func:`reported`: its
    own, else (a memory phase) the peak's."""
    fixes = dict(pred.corrections)
    mem = pred.memory
    if mem is not None and mem.peak in fixes:
        for phase in (mem.load, mem.run):
            fixes.setdefault(phase, fixes[mem.peak])
    return fixes


#: Share of a model's FLOPs or of its bytes moved (the nodes' ``mac``) above
#: which ops its predictor's training data never held are named in a warning.
UNSEEN_OP_SHARE = 0.01
UNSEEN_OPS_WARNING = ("ops that no model of the predictor's training data holds, nor an op of their "
                      "kind: {ops}; no measurement taught it their cost on this device, so the "
                      "prediction may be far off")


def unseen_ops(graph: PerfGraph, seen: Mapping[str, int]) -> list[str]:
    """The ops of ``graph`` that no training architecture holds (``seen``:
    ``training_data.ops``), whose cost is not of a generic kind that one of
    the seen ops shares (element-wise, data movement:
    :func:`perfseer_rt.graph.ops.cost_kind`; Caffe2's ``Sum`` of two tensors
    runs as an ``Add``) and that do at least :data:`UNSEEN_OP_SHARE` of its
    FLOPs or of its bytes moved, described (nodes, shares)."""
    ops = np.array(graph.node_ops, dtype=object)
    flops, mac = graph.node_column("flops"), graph.node_column("mac")
    kinds = {cost_kind(op) for op in seen} - {None}
    out = []
    for op in sorted(set(graph.node_ops) - seen.keys()):
        if cost_kind(op) in kinds:
            continue
        sel = ops == op
        f = flops[sel].sum() / flops.sum() if flops.sum() else 0.0
        m = mac[sel].sum() / mac.sum() if mac.sum() else 0.0
        if max(f, m) >= UNSEEN_OP_SHARE:
            out.append(f"{op} ({int(sel.sum())} node(s), {f:.1%} of the FLOPs, {m:.1%} of the bytes moved)")
    return out


def out_of_distribution(pred: Predictor, graph: PerfGraph) -> list[str]:
    """Why this graph lies outside what the predictor was trained on."""
    data = pred.schema.training_data if pred.schema else None
    g = graph.globals
    warnings = []
    for rng, value, what in ((data and data.flops_total, g["flops_total"], "FLOPs"),
                             (data and data.nodes, g["num_nodes"], "node count")):
        if rng and not (rng.min <= value <= rng.max):
            warnings.append(f"{what} {value:.4g} outside the training range "
                            f"[{rng.min:.4g}, {rng.max:.4g}]")
    batches = list(data.batch_sizes) if data else []
    if batches and not (min(batches) <= g["batch_size"] <= max(batches)):
        warnings.append(f"batch {g['batch_size']} outside the trained batch sizes "
                        f"{min(batches)}..{max(batches)}")
    if data is not None and data.ops is not None:
        unseen = unseen_ops(graph, data.ops)
        if unseen:
            warnings.append(UNSEEN_OPS_WARNING.format(ops="; ".join(unseen)))
    warnings.extend(graph.warnings)
    if graph.unknown_ops:
        warnings.append("ops without a cost rule: " + ", ".join(sorted(set(graph.unknown_ops))))
    return warnings


def _add_intervals(result: dict[str, Any], unc: Uncertainty, distance: float,
                   gaps: Mapping[str, float] | None, calibrated: bool = True,
                   corrections: Mapping[str, Correction] | None = None) -> None:
    """Intervals on each metric (for the result's distance score, batch size
    and the metric's disagreement gap), and a warning when the graph lies
    beyond the calibrated distance threshold or the blend's two models
    disagree on a metric beyond its threshold
    (:mod:`perfseer_rt.predict.uncertainty`). ``calibrated``: the model
    predicting is the one the intervals were calibrated for (the default);
    another model's predictions get no interval. ``corrections``: a locally
    calibrated entry's; a metric's interval is widened by its correction's
    leave-one-out width, and a corrected metric without one (an entry written
    before widths were kept) gets no interval."""
    dis = unc.disagreement
    for name, m in result["metrics"].items():
        gap = gaps.get(name) if gaps is not None else None
        iv = uncertainty.interval(unc, name, distance, result["batch"], gap) if calibrated else None
        fix = (corrections or {}).get(name)
        if iv is not None and fix is not None:
            iv = None if fix.cv_log_q90 is None else uncertainty.widened(iv, fix.cv_log_q90)
        if iv is not None:
            m["interval"], m["coverage"] = iv.around(m["value"]), iv.coverage
        if gap is not None:
            m["disagreement"] = gap
            limit = dis.thresholds.get(name) if dis is not None else None
            if limit is not None and abs(gap) > limit:
                result["warnings"].append(
                    f"{uncertainty.DISAGREEMENT_WARNING} on {name} by {100 * np.expm1(abs(gap)):.0f} % "
                    f"(> {100 * np.expm1(limit):.0f} %): on held-out models with such disagreement, "
                    "errors above 25 % were common"
                    + ("; its interval is widened with the disagreement"
                       if unc.intervals.get(name) is not None and unc.intervals[name].scale != "none" else ""))
    result["distance"] = {"score": distance, "threshold": unc.threshold}
    if distance > unc.threshold:
        result["warnings"].append(
            f"{uncertainty.DISTANCE_WARNING} (distance score {distance:.2f} > {unc.threshold:.2f}): "
            "on held-out models this far out, errors above 25 % were common; the intervals "
            "are the wider ones calibrated for such models")


def memory_parts(mem: MemoryParts, graph: PerfGraph, out: dict[str, float],
                 run_simulated: bool = False) -> dict[str, Any]:
    """The peak-memory prediction as parts (MiB): the weights (exact, from the
    graph: each initializer once), the predicted peak while the session is
    created and while it runs (``run_simulated``: from the simulated arena,
    else the network's), which of them is the peak, and the runtime's own
    baseline that the peak does not include."""
    load, run = out[mem.load], out[mem.run]
    weights = float(graph.globals["weight_total"]) / 2**20
    return {"weights_mb": weights,
            "session_load_peak_mb": load, "load_overhead_mb": max(load - weights, 0.0),
            "inference_run_peak_mb": run, "run_overhead_mb": max(run - weights, 0.0),
            "run_phase_method": ("the session's weights plus onnxruntime's arena simulated on the graph "
                                 "(run_memory.json)") if run_simulated else "the network's output",
            "peak_phase": "session creation" if load >= run else "inference",
            "combine": mem.combine,
            "runtime_baseline_mb": mem.baseline_mb,
            "note": "peak = max(session creation, inference) over the process baseline after "
                    "importing onnxruntime; the baseline (runtime_baseline_mb) is not included; "
                    "overheads are the phase peaks less the weights (prepacked copies, "
                    "activation arena)"}


def _wanted(pred: Predictor, metrics: Sequence[str] | None) -> list[str]:
    wanted = list(metrics) if metrics else pred.metrics
    missing = [m for m in wanted if m not in pred.metrics]
    if missing:
        raise MetricError(f"device {pred.device!r} does not predict {', '.join(missing)}; "
                          f"it predicts {', '.join(pred.metrics)}")
    return wanted


