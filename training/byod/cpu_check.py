"""Real models measured on this machine, for checking ``perfseer-rt calibrate``.

The registered plan (``--plan``: a ``draw_check`` plan, its ``specs``, plus
``--extra`` specs) is exported once into ``--work`` (``training.zoo``,
random weights, dynamic batch) and each (model, batch) is measured by the
CLI as a user measures it::

    [chrt -f 10] taskset -c CPUS perfseer-rt profile MODEL --batch B --threads T --min-runs R --json

Rows are appended to ``--out`` (JSON lines) as they finish; a rerun skips
(model, batch, threads, repeat) rows already there, so it resumes. Every row
keeps the record's latency statistics (median, fastest, CVs), the memory
phases, the load average before and after, the CPU set and the time.

    python -m training.byod.cpu_check export --plan reports/cpu-calibrate/eval_plan.json --work /tmp/cpuw/models
    python -m training.byod.cpu_check measure --plan ... --work ... --out reports/cpu-calibrate/measured.jsonl \\
        --threads 1 --cpus 1 --repeat 0

Scoring a device entry on these rows is :mod:`training.byod.cpu_score`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from training.seernet.user_check import exported

KEEP = ("latency_ms", "latency_min_ms", "latency_mean_ms", "latency_p90_ms", "latency_cv", "latency_robust_cv",
        "latency_windows", "latency_stable", "runs", "peak_mem_mb", "load_peak_mb", "loaded_mb", "run_peak_mb",
        "peak_mem_method", "session_ms", "threads", "status", "error", "input_shapes")


def plan_specs(plan: Path | None, extra: Sequence[str]) -> list[str]:
    specs = list(json.loads(plan.read_text())["specs"]) if plan else []
    return specs + [s for s in extra if s not in specs]


def rows_of(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def one_thread_values(path: Path, metrics: Sequence[str]) -> dict[tuple[str, int], dict[str, list[float]]]:
    """``(spec, batch) -> metric -> values`` of the file's successful
    one-thread rows that have every one of ``metrics`` (repeats pooled)."""
    acc: dict[tuple[str, int], dict[str, list[float]]] = {}
    for r in rows_of(path):
        if r.get("status") == "ok" and r.get("threads") == 1 and all(r.get(m) for m in metrics):
            per = acc.setdefault((r["spec"], r["batch"]), {m: [] for m in metrics})
            for m in metrics:
                per[m].append(float(r[m]))
    return acc


def export_all(specs: Sequence[str], work: Path) -> dict[str, str]:
    """spec -> ONNX path, or -> ``"error: ..."`` for a spec torch cannot export
    (recorded in ``work/not_exportable.json``, never replaced)."""
    work.mkdir(parents=True, exist_ok=True)
    failed_file = work / "not_exportable.json"
    failed = json.loads(failed_file.read_text()) if failed_file.exists() else {}
    out = {}
    for spec in tqdm(specs, desc="export", unit="model"):
        if spec in failed:
            out[spec] = "error: " + failed[spec]
            continue
        try:
            out[spec] = str(exported(spec, work))
        except Exception as exc:  # noqa: BLE001 - an exporter failure: a user gets no ONNX of it either
            failed[spec] = f"{type(exc).__name__}: {exc}"[:300]
            failed_file.write_text(json.dumps(failed, indent=1) + "\n")
            out[spec] = "error: " + failed[spec]
    return out


def measure(path: str, batch: int, threads: int, cpus: str, min_runs: int, rt: bool = False) -> dict[str, Any]:
    cmd = (["chrt", "-f", "10"] if rt else []) + [
        "taskset", "-c", cpus, str(Path(sys.executable).with_name("perfseer-rt")), "profile", path,
        "--batch", str(batch), "--threads", str(threads), "--min-runs", str(min_runs), "--json"]
    load0 = os.getloadavg()[0]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    load1 = os.getloadavg()[0]
    rec: dict[str, Any] = (json.loads(proc.stdout) if proc.stdout.strip()
                           else {"status": "error", "error": proc.stderr[-300:]})
    row = {k: rec.get(k) for k in KEEP}
    env = rec.get("env") or {}
    row.update(loadavg_1m=[load0, load1], cpus=cpus,
               cpu={k: env.get(k) for k in ("cpu_model", "cpu_vendor", "cpu_family", "cpu_model_id", "cpu_isa")},
               onnxruntime_version=env.get("onnxruntime_version"),
               measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               command=" ".join("MODEL" if c == path else "perfseer-rt" if c.endswith("perfseer-rt") else c
                                for c in cmd))
    return row


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.byod.cpu_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["export", "measure"])
    ap.add_argument("--plan", type=Path, default=None)
    ap.add_argument("--extra", nargs="*", default=[], help="specs beyond the plan's")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 4, 16])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cpus", default="1", help="taskset CPU list the profiler runs on")
    ap.add_argument("--repeat", type=int, default=0, help="repeat index (a second pass: 1)")
    ap.add_argument("--min-runs", type=int, default=5)
    ap.add_argument("--limit", type=int, default=None, help="only the first N models")
    ap.add_argument("--rt", action="store_true",
                    help="run the profiler at real-time priority (chrt -f 10; root): on a machine loaded by "
                         "other jobs, a time-shared core inflates even the fastest run")
    a = ap.parse_args(argv)
    specs = plan_specs(a.plan, a.extra)[:a.limit]
    paths = export_all(specs, a.work)
    if a.action == "export":
        print(f"{sum(not p.startswith('error') for p in paths.values())} of {len(specs)} exported into {a.work}")
        return 0
    if a.out is None:
        ap.error("measure needs --out")
    done = {(r["spec"], r["batch"], r["threads"], r["repeat"]) for r in rows_of(a.out) if r.get("status")}
    todo = [(s, b) for s in specs for b in a.batches if not paths[s].startswith("error")
            and (s, b, a.threads, a.repeat) not in done]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    for spec, batch in tqdm(todo, desc=f"measure {a.threads}t", unit="config"):
        row = {"spec": spec, "batch": batch, "repeat": a.repeat,
               **measure(paths[spec], batch, a.threads, a.cpus, a.min_runs, a.rt)}
        row["threads"] = a.threads
        with open(a.out, "a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
