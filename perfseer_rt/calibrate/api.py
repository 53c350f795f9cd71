"""``calibrate()``: a predictor for this machine from a minute of profiling.

1. Profile each bundled reference model (:mod:`perfseer_rt.calibrate.reference`)
   on the local CPU (or CUDA GPU) with :mod:`perfseer_rt.profile`, at
   ``threads`` intra-op threads on the CPU (default: onnxruntime's own
   count, :mod:`perfseer_rt.calibrate.threads`), in :data:`ROUNDS` rounds
   over the whole set (a burst of other load then disturbs one round of
   each model, not all of them). Latency is the geometric mean of the
   rounds' medians (what ``perfseer-rt profile`` reports; a round whose
   robust CV is over 5 % is timed again once), peak memory the least of the
   rounds' peaks as the profiler reads them.
2. Predict the same models with a base device's predictor.
3. Fit, per metric the base predicts and the profiler measured, the
   correction measured ~ base prediction (:mod:`perfseer_rt.calibrate.fit`;
   latency per kind of work where that predicts the left-out models best),
   its error estimated by leave-one-out over the reference models.
4. Write a device entry: the base predictor's ONNX files and a manifest with
   this machine's environment block, the thread count and the corrections
   (:mod:`perfseer_rt.calibrate.store`). ``predict --device NAME`` uses it.

The same fit and entry serve measurements made elsewhere
(:func:`calibrate_from_measurements`, used by ``python -m training.byod calibrate``).
"""

from __future__ import annotations

import datetime as _dt
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from perfseer_rt.calibrate import kinds
from perfseer_rt.calibrate.fit import fit_correction
from perfseer_rt.calibrate.reference import Reference, materialize, references
from perfseer_rt.calibrate.store import check_name, write_entry
from perfseer_rt.calibrate.threads import check_threads, onnxruntime_default_threads
from perfseer_rt.errors import DeviceError, PerfSeerError
from perfseer_rt.graph import PerfGraph, extract
from perfseer_rt.predict.correction import Correction
from perfseer_rt.predict.domain import DOMAIN_FILE
from perfseer_rt.predict.registry import Predictor, get_predictor, shipped_predictors, user_root
from perfseer_rt.predict.run_memory import RUN_MEMORY_FILE
from perfseer_rt.predict.seernet_run import external_weights_mb, reported, run_predictor
from perfseer_rt.profile.api import check_cuda
from perfseer_rt.profile.env import environment
from perfseer_rt.profile.timing import MeasureSettings
from perfseer_rt.profile.worker import ProfileWorker

DEFAULT_BASE = "cpu-amd-epyc-1t"
BUSY_RATIO = 1.25  # median / fastest run above this: other load disturbed the measurement
#: :attr:`CalibrationResult.round_spread` above this: the latency calibration is unreliable
ROUND_SPREAD_WARN = 0.05
#: Passes over the reference set; each model's fastest run over them is kept.
ROUNDS = 2
#: One reference model's timing in a round: short windows, timed once more when noisy.
SETTINGS = MeasureSettings(min_runs=5, min_time_s=0.1, max_time_s=5.0, warmup_runs=2, warmup_time_s=0.0,
                           max_cv=0.05, retries=1)


@dataclass
class CalibrationResult:
    """What a calibration wrote and how good it is."""

    device: str
    folder: Path
    base: str
    corrections: dict[str, Correction]
    measured: list[dict[str, Any]] = field(default_factory=list)  # per reference model: name, batch, metric values
    seconds: float = 0.0
    #: metric -> :func:`expected_real_mape`
    expected: dict[str, dict[str, float | None]] = field(default_factory=dict)

    @property
    def round_spread(self) -> float | None:
        """How much the rounds disagree: the standard deviation over the
        reference models of ``log(round 2 / round 1)`` of their median
        latency (None with fewer than 3 models measured twice). On a quiet
        machine a few per cent; far above :data:`ROUND_SPREAD_WARN`, the
        machine's speed changed while it was measured."""
        q = [np.log(r["latency_round_ms"][1] / r["latency_round_ms"][0]) for r in self.measured
             if len(r.get("latency_round_ms") or []) >= 2]
        return float(np.std(q)) if len(q) >= 3 else None

    @property
    def busy(self) -> list[str]:
        """Reference models whose median run was over 1.25x their fastest: the
        machine was busy while they ran, and the latency correction is unreliable."""
        return [r["name"] for r in self.measured
                if r.get("latency_min_ms") and (r.get("latency_ms") or 0) > BUSY_RATIO * r["latency_min_ms"]]


def expected_real_mape(correction: Correction, base_pred: Predictor) -> dict[str, float | None]:
    """The error to expect on real models: the correction's leave-one-out
    MAPE over the reference models (this machine, the references' noise)
    and the base predictor's own MAPE on real models it never saw (its
    manifest's ``real`` split, else its test split), combined as
    independent errors, ``sqrt(cv^2 + base^2)`` (%)."""
    acc = base_pred.manifest.get("accuracy") or {}
    split = acc.get("real") or acc.get("arch") or acc.get("test") or {}
    base = (split.get(base_pred.default_model, {}).get(correction.metric) or {}).get("mape")
    return {"cv_mape": correction.cv_mape, "base_real_mape": base,
            "expected_mape": float(np.hypot(correction.cv_mape, base)) if base is not None else None}


def default_name(provider: str = "cpu", threads: int | None = None) -> str:
    """``local-cpu-<threads>t`` (a CPU device is a CPU and a thread count), ``local-cuda``."""
    return f"local-{provider}" + (f"-{threads}t" if provider == "cpu" and threads else "")


def _measure(refs: Sequence[Reference], provider: str, threads: int | None, rounds: int,
             progress: Callable[..., Any] | None) -> list[dict[str, Any]]:
    """Each reference in ``rounds`` passes; per model the fastest run and
    the median of its steadiest round, the least peak memory, the CVs."""
    per: dict[str, list[dict[str, Any]]] = {r.name: [] for r in refs}
    with ProfileWorker(provider) as worker, tempfile.TemporaryDirectory(prefix="perfseer-calibrate-") as tmp:
        paths = {}
        for ref in refs:
            paths[ref.name] = Path(tmp) / f"{ref.name}.onnx"
            paths[ref.name].write_bytes(materialize(ref.path))
        done = 0
        for _ in range(rounds):
            for ref in refs:
                if per[ref.name] and per[ref.name][-1].get("status") != "ok":
                    continue  # failed once: not measured again
                per[ref.name].append(worker.measure(paths[ref.name], batch=ref.batch, threads=threads or 1,
                                                    settings=SETTINGS))
                done += 1
                if progress:
                    progress(done, rounds * len(refs), ref.name)
    rows = []
    for ref in refs:
        recs = per[ref.name]
        ok = [r for r in recs if r.get("status") == "ok" and r.get("latency_ms")]
        if not ok:
            rows.append({"name": ref.name, "spec": ref.spec, "batch": ref.batch, "status": recs[-1].get("status"),
                         "latency_ms": None, "latency_min_ms": None, "peak_mem_mb": None,
                         "error": recs[-1].get("error")})
            continue
        mems = [r["peak_mem_mb"] for r in ok if r.get("peak_mem_mb")]
        # The fit uses the rounds' medians (geometric mean), what `perfseer-rt profile`
        # reports; each round's window was timed again while its robust CV was over
        # the bound. The fastest run only flags a busy machine: under other load even
        # it is inflated, by a factor that changes from round to round.
        rows.append({"name": ref.name, "spec": ref.spec, "batch": ref.batch, "status": "ok",
                     "latency_ms": float(np.exp(np.mean([np.log(r["latency_ms"]) for r in ok]))),
                     "latency_min_ms": min(r["latency_min_ms"] for r in ok),
                     "latency_round_ms": [r["latency_ms"] for r in ok],
                     "latency_cv": max(r.get("latency_robust_cv") or 0.0 for r in ok),
                     "rounds": len(ok), "peak_mem_mb": min(mems) if mems else None, "error": None})
    return rows


def calibrate(name: str | None = None, base: str = DEFAULT_BASE, provider: str = "cpu",
              out: str | os.PathLike[str] | None = None, refs: Sequence[Reference] | None = None,
              overwrite: bool = False, progress: Callable[[int, int, str], None] | None = None,
              threads: int | None = None, rounds: int = ROUNDS) -> CalibrationResult:
    """Profile the reference models here and write a calibrated entry.

    Args:
        name: device name of the entry (default ``local-cpu-<threads>t``, ``local-cuda``).
        base: the shipped device whose predictor is corrected.
        provider: ``"cpu"`` or ``"cuda"``.
        out: entry folder (default ``user_root() / name``).
        refs: reference models (default: the bundled set).
        overwrite: replace an existing entry.
        progress: called as ``progress(done, total, model_name)``.
        threads: CPU intra-op threads (default: onnxruntime's own count here).
        rounds: passes over the reference set.

    Raises:
        PerfSeerError: bad name, a name of a shipped device, an existing
            entry without ``overwrite``, too few models measured.
        DeviceError: unknown base, or a provider this machine lacks.
    """
    t0 = time.perf_counter()
    if provider == "cpu":
        threads = check_threads(threads if threads is not None else onnxruntime_default_threads())
    else:
        threads = None
    name = name or default_name(provider, threads)
    check_name(name)
    if name in shipped_predictors():
        raise PerfSeerError(f"{name!r} is a shipped device; choose another --name")
    folder = Path(out) if out is not None else user_root() / name
    if folder.exists() and not overwrite:
        raise PerfSeerError(f"{folder} exists; pass --force to replace it")
    base_pred = get_predictor(base)
    if base_pred.corrections:
        raise PerfSeerError(f"base {base!r} is itself a calibrated entry; pick a shipped device")
    if provider == "cuda":
        check_cuda()
    elif provider != "cpu":
        raise DeviceError(f"provider {provider!r}: expected cpu or cuda")
    refs = list(refs) if refs is not None else references()
    rows = _measure(refs, provider, threads, max(1, rounds), progress)
    ok = [r for r in rows if r["status"] == "ok" and r.get("latency_ms")]
    if len(ok) < 3:
        raise PerfSeerError(f"only {len(ok)} of {len(rows)} reference models could be measured; "
                            "errors: " + "; ".join(f"{r['name']}: {r['error']}" for r in rows if r not in ok))
    by_name = {x.name: x for x in refs}
    graphs = [extract(by_name[r["name"]].path, batch=r["batch"]) for r in ok]  # structure-only is enough
    res = calibrate_from_measurements(name, base, graphs, ok, folder, overwrite=overwrite,
                                      env={**environment(gpu_index=0 if provider == "cuda" else None),
                                           **({"intra_op_threads": threads} if threads else {})},
                                      how=f"perfseer-rt calibrate: {len(ok)} bundled reference models profiled "
                                          f"with onnxruntime {provider.upper()} EP"
                                          + (f", {threads} intra-op thread(s)" if threads else "")
                                          + f", median latency of {max(1, rounds)} rounds",
                                      threads=threads)
    res.measured = rows
    res.seconds = time.perf_counter() - t0
    return res


def calibrate_from_measurements(name: str, base: str, graphs: Sequence[PerfGraph], rows: Sequence[dict[str, Any]],
                                folder: str | os.PathLike[str], overwrite: bool = False,
                                env: dict[str, Any] | str | None = None,
                                how: str = "", threads: int | None = None) -> CalibrationResult:
    """Fit the corrections of ``base`` on measured ``rows`` (dicts with the
    metric names as keys, in the base predictor's units) of models whose
    PerfGraphs are ``graphs``, and write the entry ``folder``. ``env``: the
    environment block of the machine measured (a CPU device's signature, for
    the local-CPU check), or words describing the device; ``threads``:
    the intra-op threads the rows were measured with (CPU). Latency is
    corrected per kind of work where the base has per-kind costs
    (:func:`perfseer_rt.calibrate.kinds.base_costs`) and that predicts the
    left-out models best.

    Raises:
        PerfSeerError: as :func:`calibrate`; no metric of the base among the rows.
    """
    check_name(name)
    base_pred = get_predictor(base)
    # what the base predicts, as predict reports it (external weights, peak combined)
    values = reported(base_pred, run_predictor(base_pred, graphs), external_weights_mb(graphs), graphs)
    works = np.stack([kinds.graph_work(g) for g in graphs])
    try:
        theta = kinds.base_costs(base_pred.device)
    except PerfSeerError:
        theta = None  # no per-kind costs for this base: one factor or a power law
    corrections = {}
    for j, metric in enumerate(base_pred.outputs):
        keep = [i for i, r in enumerate(rows)
                if r.get(metric) is not None and np.isfinite(r[metric]) and r[metric] > 0]
        if len(keep) >= 3:
            p, y = values[keep, j], np.array([rows[i][metric] for i in keep], dtype=np.float64)
            per_kind = metric.startswith("latency") and theta is not None
            corrections[metric] = fit_correction(metric, p, y, works[keep] if per_kind else None,
                                                 theta if per_kind else None, threads=threads)
    if not corrections:
        raise PerfSeerError(f"no metric of {base!r} ({', '.join(base_pred.metrics)}) has 3 or more measurements")
    manifest = _manifest(name, base_pred, corrections, env, how, rows)
    files = {e["file"]: base_pred.folder / e["file"] for e in base_pred.model_entries}
    if base_pred.uncertainty is not None:  # kept: predict widens its intervals by each correction's width
        ref = base_pred.uncertainty.reference_file
        files[ref] = base_pred.folder / ref
    if (base_pred.folder / DOMAIN_FILE).is_file():  # the base's domain is the entry's (the same networks)
        files[DOMAIN_FILE] = base_pred.folder / DOMAIN_FILE
    if (base_pred.folder / RUN_MEMORY_FILE).is_file():  # the run phase as the base computes it
        files[RUN_MEMORY_FILE] = base_pred.folder / RUN_MEMORY_FILE
    write_entry(Path(folder), manifest, files, overwrite=overwrite)
    return CalibrationResult(name, Path(folder), base, corrections,
                             expected=manifest["calibration"]["expected_on_real_models"])


def _manifest(name: str, base_pred: Predictor, corrections: dict[str, Correction],
              env: dict[str, Any] | str | None, how: str,
              rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    doc = {k: v for k, v in base_pred.manifest.items() if k not in ("accuracy", "report")}
    model = base_pred.default_model
    doc["device"] = {"name": name, "description": env or f"calibrated from {base_pred.device}",
                     "base": base_pred.device}
    threads = next((c.threads for c in corrections.values() if c.threads), None)
    doc["calibration"] = {
        "base": base_pred.device, "how": how, "threads": threads,
        "corrections": {m: c.to_dict() for m, c in corrections.items()},
        "expected_on_real_models": {m: expected_real_mape(c, base_pred) for m, c in corrections.items()},
        "models": [{k: r.get(k) for k in ("name", "spec", "batch", "latency_ms", "latency_min_ms", "latency_round_ms",
                                          "latency_cv", "rounds", "peak_mem_mb") if k in r} for r in rows],
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    doc["accuracy"] = {"test": {model: {m: {"mape": c.cv_mape, "within_10": c.cv_within_10, "count": c.count,
                                            "spearman": None}
                                        for m, c in corrections.items()}},
                       "test_kind": "leave-one-out over the calibration's measured models"}
    return doc
