"""The CPU inference dataset builder: sample -> export -> extract -> profile -> write.

Each architecture from :func:`training.dataset.plan.architecture_stream` is
exported once (weights included, in a temporary folder), probed at batch 1,
then measured at up to two more batch sizes chosen from the probe so that a
run takes ~1 ms..2 s. Every configuration gives one record (successful or
not) and, when extraction worked, one PerfGraph.

Output layout (read by :mod:`training.seernet.data`)::

    OUT/records/part-00000.jsonl   one JSON record per configuration
    OUT/graphs/part-00000.npz      the PerfGraphs those records point to
    OUT/campaign.json              settings and progress of the campaign

Shards are rewritten atomically after every record (npz first, then the
records), so a campaign killed at any moment leaves only whole files; a
restart resumes with the next architecture of the same deterministic
stream, skipping every (architecture, batch) already recorded.

Measurement hygiene: every record keeps its CV; a record whose robust CV is above
``noisy_cv`` is re-measured once and flagged ``quality.noisy`` if it stays
noisy; a reference set of architectures is re-measured every
``reference_every`` records (records with ``reference: true``) so that drift
over the campaign can be stated.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.dataset.plan import architecture_stream, pick_batches
from training.dataset.splits import split_arch, split_family, split_real
from training.zoo.registry import get_family

#: Per kind of campaign: the record fields that become metrics, the time
#: field prefix, and the spread that decides re-measurement (the robust CV,
#: 1.4826 MAD / median, ignores the odd run preempted by the OS, which the
#: plain CV, also kept in every record, does not).
KINDS = {
    "inference": {"metrics": ("latency_ms", "peak_mem_mb"), "time": "latency"},
    "train": {"metrics": ("step_ms", "peak_mem_mb"), "time": "step"},
}

#: Architectures re-measured through the campaign to detect drift.
REFERENCE_SPECS = (
    "resnet:depth=18,width=1.0,res=64",
    "mobilenetv2:width=1.0,depth=1.0,res=96",
    "nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|",
)


@dataclass
class Settings:
    """Campaign settings (recorded in ``campaign.json``)."""

    out: str
    target: int = 3000          # configurations (excluding reference re-measurements)
    seed: int = 0
    threads: int = 1
    per_arch: int = 3           # batch sizes per architecture (batch 1 probe included)
    min_runs: int = 5
    min_time_s: float = 0.4
    warmup_runs: int = 2
    max_latency_ms: float = 1000.0  # batch sizes are chosen to stay under this
    noisy_cv: float = 0.03
    reference_every: int = 100
    shard_size: int = 200
    time_budget_s: float | None = None
    device: str = "cpu-1t"
    families: tuple[str, ...] | None = None  # default: every family of the plan
    kind: str = "inference"     # or "train": one optimizer step in torch (CPU)
    reference: bool = True      # re-measure the reference set


class ShardWriter:
    """Accumulates records and graphs of one shard; rewrites both atomically."""

    def __init__(self, out: Path, index: int) -> None:
        from training.seernet.data import write_graph_shard

        self._write_graphs = write_graph_shard
        self.records_path = out / "records" / f"part-{index:05d}.jsonl"
        self.graphs_path = out / "graphs" / f"part-{index:05d}.npz"
        self.records: list[dict] = []
        self.keys: list[str] = []
        self.graphs: list = []

    def add(self, record: dict, graph=None) -> None:
        # a re-measured configuration (the reference set) has the same graph
        if graph is not None and record["graph_key"] not in self.keys:
            self.keys.append(record["graph_key"])
            self.graphs.append(graph)
            self._write_graphs(self.graphs_path, self.keys, self.graphs)
        self.records.append(record)
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records)
        atomic_write_bytes(self.records_path, text.encode())

    def __len__(self) -> int:
        return len(self.records)


def _records(out: Path) -> Iterator[dict]:
    """The records of ``out`` in file order."""
    for f in sorted((out / "records").glob("part-*.jsonl")):
        for line in f.read_text().splitlines():
            if line.strip():
                yield json.loads(line)


def existing(out: Path) -> tuple[set[tuple[str, int]], int, int]:
    """Done (arch_id, batch) pairs, count of non-reference records, next shard index."""
    main = [(r["arch_id"], int(r["batch"])) for r in _records(out) if not r.get("reference")]
    files = sorted((out / "records").glob("part-*.jsonl"))
    nxt = int(files[-1].stem.split("-")[1]) + 1 if files else 0
    return set(main), len(main), nxt


class MixedMethodsError(ValueError):
    """A campaign would add records measured another way to a dataset."""


def memory_methods(out: Path) -> set[str]:
    """The ``peak_mem_method`` values of the successful records in ``out``."""
    return {(r.get("quality") or {}).get("peak_mem_method")
            for r in _records(out) if r.get("status") == "ok"} - {None}


class Builder:
    """Runs one campaign; see the module docstring."""

    def __init__(self, settings: Settings, worker, log=print) -> None:
        from perfseer_rt.profile import MeasureSettings

        self.s = settings
        self.out = Path(settings.out)
        for sub in ("records", "graphs"):
            (self.out / sub).mkdir(parents=True, exist_ok=True)
        self.worker = worker
        self.log = log
        self.measure_settings = MeasureSettings(
            min_runs=settings.min_runs, min_time_s=settings.min_time_s, max_time_s=10.0,
            warmup_runs=settings.warmup_runs)
        self.done, self.count, shard_index = existing(self.out)
        self.memory_methods = memory_methods(self.out)
        self.shard_index = shard_index
        self.shard = ShardWriter(self.out, shard_index)
        self.tmp = Path(tempfile.mkdtemp(prefix="psrt-build-"))
        self.since_reference = 0
        self.env = None

    # ----------------------------------------------------------------- pieces
    def _env(self) -> dict:
        if self.env is None:
            from perfseer_rt.profile import environment
            self.env = environment(gpu_index=None)
        return self.env

    def _write(self, record: dict, graph=None) -> None:
        self.shard.add(record, graph)
        if len(self.shard) >= self.s.shard_size:
            self.shard_index += 1
            self.shard = ShardWriter(self.out, self.shard_index)

    def _measure_once(self, cfg, path: Path, batch: int) -> dict:
        if self.s.kind == "train":
            return self.worker.measure(json.loads(cfg.to_json()), batch, threads=self.s.threads,
                                       settings=self.measure_settings)
        return self.worker.measure(path, batch=batch, threads=self.s.threads,
                                   settings=self.measure_settings)

    def _measure(self, cfg, path: Path, batch: int) -> dict:
        noise = f"{KINDS[self.s.kind]['time']}_robust_cv"
        rec = self._measure_once(cfg, path, batch)
        cv = rec.get(noise)
        if rec.get("status") == "ok" and cv is not None and cv > self.s.noisy_cv:
            again = self._measure_once(cfg, path, batch)
            again_cv = again.get(noise)
            if again.get("status") == "ok" and again_cv is not None and again_cv < cv:
                rec = again
            rec["remeasured"] = True
        return rec

    def _record(self, cfg, spec: str, batch: int, rec: dict, graph, reference: bool) -> dict:
        status = rec.get("status", "error")
        kind = KINDS[self.s.kind]
        t = kind["time"]
        metrics = {}
        if status == "ok":
            metrics = {k: rec[k] for k in kind["metrics"] if rec.get(k) is not None}
        cv = rec.get(f"{t}_robust_cv")
        quality = {k: rec.get(k) for k in (f"{t}_cv", f"{t}_robust_cv", "runs", "window_s",
                                           "warmup_runs", f"{t}_min_ms", f"{t}_mean_ms",
                                           f"{t}_p90_ms", "peak_mem_method", "session_ms",
                                           "load_peak_mb", "loaded_mb", "run_peak_mb",
                                           "build_ms", "optimizer", "torch_max_allocated_mb")
                   if k in rec}
        method = quality.get("peak_mem_method")
        if status == "ok" and method and self.memory_methods - {method}:
            raise MixedMethodsError(
                f"{self.out}: its records measured peak memory as "
                f"{', '.join(sorted(self.memory_methods))}, this run as {method} "
                "(perfseer_rt.profile.hostmem); the two do not mix: build a new dataset folder")
        if status == "ok" and method:
            self.memory_methods.add(method)
        quality["remeasured"] = bool(rec.get("remeasured"))
        quality["noisy"] = bool(status == "ok" and cv is not None and cv > self.s.noisy_cv)
        g = graph.globals if graph is not None else {}
        return {
            "kind": self.s.kind, "arch_id": cfg.arch_id, "family": cfg.family,
            "group": get_family(cfg.family).group_of(cfg.params), "spec": spec,
            "config": json.loads(cfg.to_json()), "batch": batch, "device": self.s.device,
            "status": status, "error": rec.get("error"), "metrics": metrics, "quality": quality,
            "flops": g.get("flops_total"), "params": g.get("params_total"),
            "nodes": g.get("num_nodes"),
            "provider": {k: rec.get(k) for k in ("provider_requested", "provider_used",
                                                 "provider_options", "threads")},
            "input_shapes": rec.get("input_shapes"),
            "split_arch": split_arch(cfg.arch_id),
            "split_family": split_family(cfg.arch_id, cfg.family),
            "split_real": split_real(cfg.arch_id, cfg.family,
                                     get_family(cfg.family).group_of(cfg.params)),
            "graph_key": f"{cfg.family}/{cfg.arch_id}/b{batch}" if graph is not None else None,
            "reference": reference, "env": self._env(),
            # the machine's 1/5/15-min load when the record was written: load on the
            # other core slows the measuring one (up to ~40 % seen on this 2-vCPU VM)
            "host_loadavg": list(os.getloadavg()),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }

    def run_architecture(self, cfg, rng: random.Random, reference: bool = False,
                         exported: Future | None = None) -> int:
        """Export (or take the prefetched export), probe and measure one
        architecture; returns records written."""
        from perfseer_rt import extract
        from training.zoo import to_spec

        spec = to_spec(cfg)
        path = self.tmp / f"{cfg.arch_id}.onnx"
        try:
            if exported is None:
                export_job(cfg.to_json(), str(path))
            else:
                exported.result()
        except Exception as exc:  # noqa: BLE001 - an unexportable config is logged, not fatal
            self.log(f"export failed for {spec}: {exc}")
            return 0
        written = 0
        try:
            batches = [1]
            i = 0
            while i < len(batches):
                batch = batches[i]
                i += 1
                if not reference and (cfg.arch_id, batch) in self.done:
                    continue
                try:
                    graph = extract(path, batch=batch)
                except Exception as exc:  # noqa: BLE001 - recorded as a failed config
                    graph, rec = None, {"status": "error", "error": f"extract: {exc}"}
                else:
                    rec = self._measure(cfg, path, batch)
                self._write(self._record(cfg, spec, batch, rec, graph, reference), graph)
                written += 1
                if not reference:
                    self.done.add((cfg.arch_id, batch))
                if batch == 1 and not reference and rec.get("status") == "ok":
                    batches += pick_batches(rec[f"{KINDS[self.s.kind]['time']}_ms"], rng,
                                            self.s.per_arch,
                                            hi_ms=self.s.max_latency_ms)
        finally:
            path.unlink(missing_ok=True)
            for extra in self.tmp.glob(f"{cfg.arch_id}*"):
                extra.unlink(missing_ok=True)
        return written

    def reference_pass(self) -> None:
        from training.zoo import parse_spec

        if not self.s.reference:
            return
        for spec in REFERENCE_SPECS:
            self.run_architecture(parse_spec(spec), random.Random(0), reference=True)

    def run(self) -> int:
        """Measure until ``target`` configurations exist or the budget ends."""
        try:
            return self._run()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _run(self) -> int:
        start = time.monotonic()
        self._save_campaign("running")
        self.reference_pass()
        try:
            from tqdm import tqdm
            bar = tqdm(total=self.s.target, initial=min(self.count, self.s.target),
                       unit="cfg", file=sys.stderr, dynamic_ncols=True)
        except ImportError:  # progress falls back to log lines
            bar = None
        stream = self._new_architectures()
        pool = _export_pool()
        queue: deque = deque()
        while self.count < self.s.target:
            if self.s.time_budget_s and time.monotonic() - start > self.s.time_budget_s:
                self.log("time budget reached; stopping cleanly")
                break
            while len(queue) < PREFETCH:  # exports overlap the measurements
                nxt = next(stream)
                queue.append((nxt, pool.submit(export_job, nxt.to_json(),
                                               str(self.tmp / f"{nxt.arch_id}.onnx"))))
            cfg, exported = queue.popleft()
            arch_rng = random.Random(f"{self.s.seed}/{cfg.arch_id}")
            n = self.run_architecture(cfg, arch_rng, exported=exported)
            self.count += n
            self.since_reference += n
            if bar is not None:
                bar.update(n)
            else:
                self.log(f"{self.count}/{self.s.target} configurations")
            if self.since_reference >= self.s.reference_every:
                self.reference_pass()
                self.since_reference = 0
        for _, fut in queue:
            fut.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        self.reference_pass()
        if bar is not None:
            bar.close()
        self._save_campaign("done" if self.count >= self.s.target else "stopped")
        return self.count

    def _new_architectures(self):
        """The plan's stream without architectures measured before."""
        seen: set[str] = set()
        for cfg in architecture_stream(self.s.seed, self.s.families):
            if cfg.arch_id in seen or (cfg.arch_id, 1) in self.done:
                continue  # measured before (this run or a resumed one)
            seen.add(cfg.arch_id)
            yield cfg

    def _save_campaign(self, state: str) -> None:
        doc = {"settings": asdict(self.s), "state": state, "configurations": self.count,
               "env": self._env(), "measure_settings": self.measure_settings.to_dict(),
               "reference_specs": list(REFERENCE_SPECS),
               "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        atomic_write_bytes(self.out / "campaign.json", json.dumps(doc, indent=2).encode())


#: Architectures exported ahead of the one being measured.
PREFETCH = 2


def export_job(config_json: str, path: str) -> str:
    """Export one zoo config to ``path`` (runs in the export pool)."""
    from training.zoo import ModelConfig, export_onnx

    export_onnx(ModelConfig.from_json(config_json), path)
    return path


def _export_worker_init() -> None:
    """Exports run at normal priority on the cores the measurement does not use."""
    import os

    try:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except (AttributeError, PermissionError, OSError):
        pass
    measuring = os.sched_getaffinity(0)  # inherited from the measuring parent
    others = set(range(os.cpu_count() or 1)) - measuring
    if others:  # keep the measuring core(s) quiet
        os.sched_setaffinity(0, others)
    import torch

    torch.set_num_threads(1)


def _export_pool() -> ProcessPoolExecutor:
    import multiprocessing

    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_export_worker_init)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.dataset",
                                 description="Build the CPU inference dataset (resumable).")
    ap.add_argument("--out", required=True, help="dataset folder (created or resumed)")
    ap.add_argument("--target", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--min-time", type=float, default=0.4, help="timed window per config, s")
    ap.add_argument("--min-runs", type=int, default=5, help="least timed runs per config")
    ap.add_argument("--max-latency", type=float, default=1000.0,
                    help="batch sizes are chosen to stay under this latency, ms")
    ap.add_argument("--time-budget", type=float, default=None, help="stop after this many s")
    ap.add_argument("--device", default="cpu-1t", help="device name recorded in every record")
    ap.add_argument("--families", default=None, help="comma-separated subset of families")
    ap.add_argument("--kind", choices=sorted(KINDS), default="inference",
                    help="inference (onnxruntime) or train (one torch optimizer step)")
    args = ap.parse_args(argv)
    from perfseer_rt.profile import ProfileWorker

    settings = Settings(out=args.out, target=args.target, seed=args.seed, threads=args.threads,
                        min_time_s=args.min_time, min_runs=args.min_runs,
                        max_latency_ms=args.max_latency, time_budget_s=args.time_budget,
                        device=args.device,
                        families=tuple(args.families.split(",")) if args.families else None)
    settings.kind = args.kind
    if args.kind == "train":
        from training.profile_train import TrainWorker
        worker_cm = TrainWorker("cpu")
    else:
        worker_cm = ProfileWorker("cpu")
    try:
        with worker_cm as worker:
            n = Builder(settings, worker).run()
    except MixedMethodsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{n} configurations in {args.out}")
    return 0
