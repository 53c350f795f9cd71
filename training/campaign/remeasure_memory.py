"""Re-measure the peak memory of a CPU inference dataset the way
``perfseer-rt profile`` measures it, keeping every record's latency.

    python -m training.campaign.remeasure_memory data/cpu-amd-epyc-1t/inference [--limit N]

Why: records measured in a reused measuring child read more memory for small
models than the CLI, which measures each model in a fresh child (up to
+56 %: :mod:`perfseer_rt.profile.hostmem`). Memory labels must be what users
measure. Memory needs no quiet machine: a fresh child reads the same model to
0.1 MiB whatever else runs, so this pass may run beside other work (latency,
which it keeps, may not).

For each architecture with an ``ok`` record whose ``peak_mem_method`` is not
a fresh child's, in dataset order:

1. export it once with the zoo (the campaign's exporter, deterministic
   weights; one architecture ahead in a separate process);
2. re-extract the PerfGraph of each of its batch sizes with the current
   extractor (the dataset's graphs follow extractor fixes, e.g. weights shared
   through ``Identity`` nodes counted once);
3. measure each batch size in a fresh child with :data:`SETTINGS` (1 warm-up
   run, then the run whose peak is read, then 1 timed run; with 3 timed runs
   memory agreed with the CLI's default settings to 0.9 % on four models) and
   replace the record's memory fields: ``metrics.peak_mem_mb``
   and ``quality.{load_peak_mb, loaded_mb, run_peak_mb, peak_mem_process_mb,
   peak_mem_method}``. The values replaced go to ``quality.memory_before``;
   ``quality.memory_remeasured`` says when, with which onnxruntime and
   settings. A configuration that fails now keeps its latency and loses its
   memory label (``peak_mem_mb`` None, the error in ``memory_remeasured``).

Files are rewritten atomically every ``--flush-s`` seconds (records and the
graph shards they touch); a rerun skips records already measured fresh, so
it resumes. The CPU must be the dataset's (same guard as the campaign).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from perfseer_rt.graph.extract import extract_batches
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.profile import PRESETS, ProfileWorker, environment, hostmem
from training.campaign.store import MixedCpuError, cpu_signature
from training.campaign.zoo_cases import export_case, export_worker_init
from training.seernet.data import read_graph_shard, write_graph_shard

#: Settings of the memory measurement: the profiler reads the run phase's peak
#: after the warm-up and one more run, before the timed loop, so one timed run
#: is enough (its latency is kept only as ``memory_remeasured.latency_ms_now``).
SETTINGS = PRESETS["memory"]
#: The method every record has afterwards (what ``perfseer-rt profile`` reads).
FRESH = hostmem.CLI_METHOD
#: Memory fields replaced (``quality`` keys; ``metrics.peak_mem_mb`` too).
MEMORY_FIELDS = ("load_peak_mb", "loaded_mb", "run_peak_mb", "peak_mem_process_mb", "peak_mem_method")


class Dataset:
    """The records and graph shards of a dataset folder, held in memory and
    written back part by part (atomically) when they changed."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.parts: dict[Path, list[dict]] = {
            f: [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
            for f in sorted((folder / "records").glob("*.jsonl"))}
        self.graphs: dict[Path, dict[str, tuple]] = {}
        self.dirty: set[Path] = set()

    def records(self) -> list[tuple[Path, dict]]:
        return [(f, r) for f, rs in self.parts.items() for r in rs]

    def shard_of(self, part: Path) -> Path:
        return self.folder / "graphs" / (part.stem + ".npz")

    def set_graph(self, part: Path, key: str, graph: Any) -> None:
        shard = self.shard_of(part)
        if shard not in self.graphs:
            self.graphs[shard] = read_graph_shard(shard) if shard.exists() else {}
        self.graphs[shard][key] = (graph.x, graph.edge_index, graph.edge_attr, graph.u)
        self.dirty.add(part)

    def flush(self) -> None:
        """Write every changed part: its graph shard first, then its records."""
        for part in sorted(self.dirty):
            shard = self.shard_of(part)
            if shard in self.graphs:
                keys = list(self.graphs[shard])
                write_graph_shard(shard, keys, [_Graph(*self.graphs[shard][k]) for k in keys])
            atomic_write_bytes(part, "".join(json.dumps(r) + "\n" for r in self.parts[part]).encode())
        self.dirty.clear()


class _Graph:
    """Arrays of a stored graph in the shape :func:`write_graph_shard` takes."""

    def __init__(self, x: Any, edge_index: Any, edge_attr: Any, u: Any):
        self.x, self.edge_index, self.edge_attr, self.u = x, edge_index, edge_attr, u


def pending(ds: Dataset) -> dict[str, list[tuple[Path, dict]]]:
    """``arch_id -> [(part, record)]`` of the ok records still to re-measure,
    architectures in dataset order."""
    todo: dict[str, list[tuple[Path, dict]]] = defaultdict(list)
    for part, r in ds.records():
        q = r.get("quality") or {}
        if r.get("status") == "ok" and q.get("peak_mem_method") != FRESH and "memory_remeasured" not in q:
            todo[r["arch_id"]].append((part, r))
    return todo


def update(record: dict, rec: dict, env: dict) -> None:
    """Replace ``record``'s memory fields by those of the fresh measurement ``rec``."""
    q = record.setdefault("quality", {})
    q["memory_before"] = {"peak_mem_mb": record["metrics"].get("peak_mem_mb"),
                          **{k: q.get(k) for k in MEMORY_FIELDS}}
    ok = rec.get("status") == "ok" and rec.get("peak_mem_mb")
    record["metrics"]["peak_mem_mb"] = rec["peak_mem_mb"] if ok else None
    for k in MEMORY_FIELDS:
        q[k] = rec.get(k) if ok else None
    q["memory_remeasured"] = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "onnxruntime_version": env.get("onnxruntime_version"), "settings": SETTINGS.to_dict(),
        "latency_ms_now": rec.get("latency_ms") if ok else None,
        **({} if ok else {"error": rec.get("error") or rec.get("status")})}


def run(folder: Path, limit: int | None = None, flush_s: float = 60.0, timeout_s: float = 600.0,
        progress: bool = True, exporters: int = 1) -> int:
    """Re-measure the pending records of ``folder`` (``exporters`` export
    processes, each one architecture ahead); returns how many were done."""
    ds = Dataset(folder)
    todo = pending(ds)
    archs = list(todo)[:limit] if limit else list(todo)
    env = environment()
    ref = next((r.get("env") for _, r in ds.records() if r.get("status") == "ok"), None)
    diff = {k: (v, cpu_signature(env).get(k)) for k, v in cpu_signature(ref).items()
            if k in cpu_signature(env) and cpu_signature(env)[k] != v}
    if diff:
        raise MixedCpuError(f"{folder}: measured on another CPU ({diff}); memory labels do not mix")
    with tempfile.TemporaryDirectory(prefix="perfseer-remem-") as tmp, \
            ProcessPoolExecutor(exporters, initializer=export_worker_init) as pool, \
            ProfileWorker("cpu", fresh=True, timeout_s=timeout_s) as worker:
        def submit(i: int) -> Future | None:
            if i >= len(archs):
                return None
            r = todo[archs[i]][0][1]
            return pool.submit(export_case, json.dumps(r["config"]), f"{tmp}/{archs[i]}.onnx")

        ahead = [submit(i) for i in range(exporters)]
        try:
            done = _loop(ds, todo, archs, submit, ahead, worker, env, tmp, flush_s, progress)
        finally:  # an interrupted run keeps what it measured
            ds.flush()
    return done


def _loop(ds: Dataset, todo: dict[str, list[tuple[Path, dict]]], archs: list[str], submit: Any,
          ahead: list[Future | None], worker: ProfileWorker, env: dict, tmp: str, flush_s: float,
          progress: bool) -> int:
    done, last = 0, time.monotonic()
    for i, arch in enumerate(tqdm(archs, desc="memory re-measure", disable=not progress)):
        fut = ahead.pop(0)
        ahead.append(submit(i + len(ahead) + 1))
        items = todo[arch]
        try:
            if fut is None:
                raise RuntimeError("no export was started")
            path = fut.result()["path"]
            batches = sorted({int(r["batch"]) for _, r in items})
            graphs = dict(zip(batches, extract_batches(path, batches)))
        except Exception as exc:  # export or extraction fails now: no memory label
            for part, r in items:
                update(r, {"status": "error", "error": f"export/extract: {exc}"}, env)
                ds.dirty.add(part)
            continue
        measured: dict[int, dict] = {}  # one measurement per batch size, except that the
        for part, r in items:            # reference re-measures are each measured again (their
            b = int(r["batch"])          # spread is the data card's noise floor)
            if b not in measured or r.get("reference"):
                measured[b] = worker.measure(path, batch=b, settings=SETTINGS)
            update(r, measured[b], env)
            ds.set_graph(part, r["graph_key"], graphs[b])
            done += 1
        for p in Path(tmp).glob(f"{arch}.onnx*"):
            p.unlink()
        if time.monotonic() - last > flush_s:
            ds.flush()
            last = time.monotonic()
    return done


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.campaign.remeasure_memory", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="dataset folder (records/, graphs/)")
    ap.add_argument("--limit", type=int, default=None, help="at most this many architectures")
    ap.add_argument("--flush-s", type=float, default=60.0, help="write changed files this often (s)")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="one measurement's limit (s)")
    ap.add_argument("--exporters", type=int, default=1, help="export processes (each one architecture ahead)")
    a = ap.parse_args(argv)
    if not (a.folder / "records").is_dir():
        print(f"error: {a.folder} is not a dataset folder (no records/)", file=sys.stderr)
        return 2
    n = run(a.folder, a.limit, a.flush_s, a.timeout_s, exporters=max(1, a.exporters))
    print(f"re-measured {n} records; remaining {sum(len(v) for v in pending(Dataset(a.folder)).values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
