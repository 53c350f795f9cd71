"""``calibrate()``: a predictor for this machine from a minute of profiling.

1. Profile each bundled reference model (:mod:`perfseer_rt.calibrate.reference`)
   on the local CPU (or CUDA GPU) with :mod:`perfseer_rt.profile`, one
   intra-op thread on the CPU like the shipped CPU device. Latency is the
   fastest timed run (robust to other load on the machine), peak memory as
   the profiler reads it.
2. Predict the same models with a base device's predictor.
3. Fit, per metric the base predicts and the profiler measured, the
   correction measured ~ base prediction (:mod:`perfseer_rt.calibrate.fit`),
   its error estimated by leave-one-out over the reference models.
4. Write a device entry: the base predictor's ONNX files and a manifest with
   this machine's environment block and the corrections
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

from perfseer_rt.calibrate.fit import fit_correction
from perfseer_rt.calibrate.reference import Reference, materialize, references
from perfseer_rt.calibrate.store import check_name, write_entry
from perfseer_rt.errors import DeviceError, PerfSeerError
from perfseer_rt.graph import PerfGraph, extract
from perfseer_rt.predict.correction import Correction
from perfseer_rt.predict.registry import Predictor, get_predictor, shipped_predictors, user_root
from perfseer_rt.predict.seernet_run import external_weights_mb, reported, run_predictor
from perfseer_rt.profile.api import check_cuda
from perfseer_rt.profile.env import environment
from perfseer_rt.profile.worker import ProfileWorker

DEFAULT_BASE = "cpu-amd-epyc-1t"
THREADS = 1  # as the shipped CPU device: one intra-op thread
BUSY_RATIO = 1.25  # median / fastest run above this: other load disturbed the measurement


@dataclass
class CalibrationResult:
    """What a calibration wrote and how good it is."""

    device: str
    folder: Path
    base: str
    corrections: dict[str, Correction]
    measured: list[dict[str, Any]] = field(default_factory=list)  # per reference model: name, batch, metric values
    seconds: float = 0.0

    @property
    def busy(self) -> list[str]:
        """Reference models whose median run was over 1.25x their fastest: the
        machine was busy while they ran, and the latency correction is unreliable."""
        return [r["name"] for r in self.measured
                if r.get("latency_ms") and r.get("latency_median_ms", 0) > BUSY_RATIO * r["latency_ms"]]


def default_name(provider: str = "cpu") -> str:
    return f"local-{provider}"


def _measure(refs: Sequence[Reference], provider: str, progress: Callable[..., Any] | None) -> list[dict[str, Any]]:
    rows = []
    with ProfileWorker(provider) as worker, tempfile.TemporaryDirectory(prefix="perfseer-calibrate-") as tmp:
        for i, ref in enumerate(refs):
            path = Path(tmp) / f"{ref.name}.onnx"
            path.write_bytes(materialize(ref.path))
            rec = worker.measure(path, batch=ref.batch, threads=THREADS)
            path.unlink()
            # The fit uses the fastest run (latency_min_ms), not the median: other load on
            # the machine inflates the median by a model-dependent factor, the minimum
            # hardly; on a quiet core the two differ by a few per cent.
            rows.append({"name": ref.name, "spec": ref.spec, "batch": ref.batch, "status": rec.get("status"),
                         "latency_ms": rec.get("latency_min_ms"), "latency_median_ms": rec.get("latency_ms"),
                         "peak_mem_mb": rec.get("peak_mem_mb"),
                         "latency_cv": rec.get("latency_cv"), "error": rec.get("error")})
            if progress:
                progress(i + 1, len(refs), ref.name)
    return rows


def calibrate(name: str | None = None, base: str = DEFAULT_BASE, provider: str = "cpu",
              out: str | os.PathLike[str] | None = None, refs: Sequence[Reference] | None = None,
              overwrite: bool = False, progress: Callable[[int, int, str], None] | None = None
              ) -> CalibrationResult:
    """Profile the reference models here and write a calibrated entry.

    Args:
        name: device name of the entry (default ``local-<provider>``).
        base: the shipped device whose predictor is corrected.
        provider: ``"cpu"`` or ``"cuda"``.
        out: entry folder (default ``user_root() / name``).
        refs: reference models (default: the bundled set).
        overwrite: replace an existing entry.
        progress: called as ``progress(done, total, model_name)``.

    Raises:
        PerfSeerError: bad name, a name of a shipped device, an existing
            entry without ``overwrite``, too few models measured.
        DeviceError: unknown base, or a provider this machine lacks.
    """
    t0 = time.perf_counter()
    name = name or default_name(provider)
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
    rows = _measure(refs, provider, progress)
    ok = [r for r in rows if r["status"] == "ok" and r.get("latency_ms")]
    if len(ok) < 3:
        raise PerfSeerError(f"only {len(ok)} of {len(rows)} reference models could be measured; "
                            "errors: " + "; ".join(f"{r['name']}: {r['error']}" for r in rows if r not in ok))
    by_name = {x.name: x for x in refs}
    graphs = [extract(by_name[r["name"]].path, batch=r["batch"]) for r in ok]  # structure-only is enough
    res = calibrate_from_measurements(name, base, graphs, ok, folder, overwrite=overwrite,
                                      env=environment(gpu_index=0 if provider == "cuda" else None),
                                      how=f"perfseer-rt calibrate: {len(ok)} bundled reference models profiled "
                                          f"with onnxruntime {provider.upper()} EP"
                                          + (f", {THREADS} intra-op thread" if provider == "cpu" else ""))
    res.measured = rows
    res.seconds = time.perf_counter() - t0
    return res


def calibrate_from_measurements(name: str, base: str, graphs: Sequence[PerfGraph], rows: Sequence[dict[str, Any]],
                                folder: str | os.PathLike[str], overwrite: bool = False,
                                env: dict[str, Any] | str | None = None,
                                how: str = "") -> CalibrationResult:
    """Fit the corrections of ``base`` on measured ``rows`` (dicts with the
    metric names as keys, in the base predictor's units) of models whose
    PerfGraphs are ``graphs``, and write the entry ``folder``. ``env``: the
    environment block of the machine measured (a CPU device's signature, for
    the local-CPU check), or words describing the device.

    Raises:
        PerfSeerError: as :func:`calibrate`; no metric of the base among the rows.
    """
    check_name(name)
    base_pred = get_predictor(base)
    # what the base predicts, as predict reports it (external weights, peak combined)
    values = reported(base_pred, run_predictor(base_pred, graphs), external_weights_mb(graphs))
    corrections = {}
    for j, metric in enumerate(base_pred.outputs):
        pairs = [(values[i, j], r[metric]) for i, r in enumerate(rows)
                 if r.get(metric) is not None and np.isfinite(r[metric]) and r[metric] > 0]
        if len(pairs) >= 3:
            p, y = map(np.array, zip(*pairs))
            corrections[metric] = fit_correction(metric, p, y)
    if not corrections:
        raise PerfSeerError(f"no metric of {base!r} ({', '.join(base_pred.metrics)}) has 3 or more measurements")
    manifest = _manifest(name, base_pred, corrections, env, how, rows)
    files = {e["file"]: base_pred.folder / e["file"] for e in base_pred.model_entries}
    if base_pred.uncertainty is not None:  # kept: predict widens its intervals by each correction's width
        ref = base_pred.uncertainty.reference_file
        files[ref] = base_pred.folder / ref
    write_entry(Path(folder), manifest, files, overwrite=overwrite)
    return CalibrationResult(name, Path(folder), base, corrections)


def _manifest(name: str, base_pred: Predictor, corrections: dict[str, Correction],
              env: dict[str, Any] | str | None, how: str,
              rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    doc = {k: v for k, v in base_pred.manifest.items() if k not in ("accuracy", "report")}
    model = base_pred.default_model
    doc["device"] = {"name": name, "description": env or f"calibrated from {base_pred.device}",
                     "base": base_pred.device}
    doc["calibration"] = {
        "base": base_pred.device, "how": how,
        "corrections": {m: c.to_dict() for m, c in corrections.items()},
        "models": [{k: r.get(k) for k in ("name", "spec", "batch", "latency_ms", "latency_median_ms", "peak_mem_mb")
                    if k in r} for r in rows],
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    doc["accuracy"] = {"test": {model: {m: {"mape": c.cv_mape, "within_10": c.cv_within_10, "count": c.count,
                                            "spearman": None}
                                        for m, c in corrections.items()}},
                       "test_kind": "leave-one-out over the calibration's measured models"}
    return doc
