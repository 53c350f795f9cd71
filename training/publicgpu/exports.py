"""Rebuild every architecture of the records as a structure-only ONNX file.

One job per distinct ``(timm model, img_size)`` of the records, exported with
the TorchScript exporter into ``CACHE/torchscript/<model>@<img_size>.onnx``;
a seeded random :data:`DYNAMO_SHARE` of them also with the dynamo exporter
into ``CACHE/dynamo/`` (to check that predictions do not depend on the
exporter). Each job runs in the export process of
:mod:`training.publicgpu.worker` (time and memory limits) and then checks
that ``perfseer_rt`` extracts the file at batch 1 and at the largest label
batch of that architecture.

Every attempt appends one line to the log (``exports.jsonl``)::

    model, img_size, exporter, status ("ok" | "failed" | "skipped"), reason,
    file (relative to the cache), nodes, ops (op type -> count), depthwise_convs,
    onnx_sha256, onnx_bytes, params, default_res, img_size_arg, opset,
    torch_version, timm_version, onnx_version, export_s, seconds, peak_rss_mb,
    extract {batch, status, error, flops_b1, flops, nodes, extract_s}, at

A re-run skips every ``(model, img_size, exporter)`` the log already holds
(failures too, unless ``retry_failed``; an ``ok`` whose file is gone is
redone). An architecture the TorchScript exporter fails on (not by time or
memory) is tried with the dynamo exporter after the queue (``fallback: true``): use
:func:`training.publicgpu.cache.onnx_file` to find the rebuild of a record.
The queue goes round-robin over families (timm modules), smallest models
first within a family, so a partial run covers every family.
Architectures over ``max_params_m`` million parameters are not tried (the
export's memory grows ~3-4x the fp32 weights; the machine is shared) and are
logged ``skipped`` with the reason (redone when a later run allows them);
those over :data:`LEAN_PARAMS_M` are exported with all parameters sharing one
buffer (``lean``: the same graph, less memory).
"""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from tqdm import tqdm

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.publicgpu.cache import clean, onnx_name
from training.publicgpu.worker import ExportWorker

#: Share of architectures also exported with the dynamo exporter, and its seed.
DYNAMO_SHARE, DYNAMO_SEED = 0.10, 2026
#: Failures after which the other exporter is not tried (it would fail the same way).
NO_FALLBACK = ("timeout", "over the memory limit")
#: Largest model tried (million parameters; see module doc).
MAX_PARAMS_M = 700.0
#: Models over this many million parameters are exported ``lean``
#: (training.publicgpu.export_one.share_parameters: ~2.8x instead of ~3.8x the fp32 weights).
LEAN_PARAMS_M = 150.0


@dataclass(frozen=True)
class Job:
    """One export: an architecture, an exporter and the label batch to extract at."""

    model: str
    img_size: int
    exporter: str
    batch: int
    group: str
    params_m: float | None

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.model, self.img_size, self.exporter)

    @property
    def file(self) -> str:
        return onnx_name(self.model, self.img_size, self.exporter)


def architectures(records: Iterable[dict]) -> dict[tuple[str, int], dict]:
    """(model, img_size) -> {"batch": largest label batch, "group", "params_m"} over timm records."""
    out: dict[tuple[str, int], dict] = {}
    for r in records:
        if r.get("family") != "timm":
            continue
        key = (r["config"]["params"]["model"], int(r["config"]["params"]["res"]))
        a = out.setdefault(key, {"batch": 0, "group": r["group"], "params_m": None})
        a["batch"] = max(a["batch"], int(r["batch"]))
        p = (r.get("published") or {}).get("param_count_m")
        if p is not None:
            a["params_m"] = max(a["params_m"] or 0.0, float(p))
    return out


def queue(archs: dict[tuple[str, int], dict], share: float = DYNAMO_SHARE,
          seed: int = DYNAMO_SEED) -> list[Job]:
    """The jobs in run order: round-robin over groups, small models first in each;
    a job's dynamo twin (the seeded sample) right after it."""
    keys = sorted(archs)
    dynamo = set(random.Random(seed).sample(keys, round(share * len(keys)))) if keys else set()
    by_group: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for k in keys:
        by_group[archs[k]["group"]].append(k)
    for members in by_group.values():
        members.sort(key=lambda k: (archs[k]["params_m"] or 0.0, k))
    jobs: list[Job] = []
    lanes = [by_group[g] for g in sorted(by_group)]
    for i in range(max((len(lane) for lane in lanes), default=0)):
        for lane in lanes:
            if i < len(lane):
                k = lane[i]
                a = archs[k]
                for exporter in ("torchscript", "dynamo") if k in dynamo else ("torchscript",):
                    jobs.append(Job(k[0], k[1], exporter, a["batch"], a["group"], a["params_m"]))
    return jobs


def read_log(path: Path) -> list[dict]:
    """The log's entries in order (a torn last line is skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def latest(entries: Iterable[dict]) -> dict[tuple[str, int, str], dict]:
    """The last entry of every (model, img_size, exporter)."""
    return {(e["model"], int(e["img_size"]), e["exporter"]): e for e in entries}


def _append(path: Path, entry: dict) -> None:
    """Append one line (the whole file is rewritten atomically: no torn lines)."""
    old = path.read_bytes() if path.exists() else b""
    if old and not old.endswith(b"\n"):
        old += b"\n"
    atomic_write_bytes(path, old + (json.dumps(entry, sort_keys=True) + "\n").encode())


def pending(jobs: list[Job], log: Path, cache: Path, retry_failed: bool = False,
            max_params_m: float = MAX_PARAMS_M) -> list[Job]:
    """The jobs a run still has to do (see module doc)."""
    done = latest(read_log(log))
    todo = []
    for j in jobs:
        e = done.get(j.key)
        if e is None or (e["status"] == "ok" and not (cache / j.file).exists()) \
                or (retry_failed and e["status"] == "failed") \
                or (e["status"] == "skipped" and (j.params_m or 0.0) <= max_params_m):
            todo.append(j)
    return todo


def run(jobs: list[Job], cache: Path, log: Path, *, timeout_s: float = 900.0,
        mem_limit_mb: float = 8000.0, max_params_m: float = MAX_PARAMS_M,
        retry_failed: bool = False, limit: int | None = None,
        worker: ExportWorker | None = None) -> Iterator[dict]:
    """Do the pending jobs and then the dynamo fallbacks (at most ``limit`` exports
    in all), logging and yielding each entry."""
    todo = pending(jobs, log, cache, retry_failed, max_params_m)[:limit]
    queued = {j.key for j in jobs}
    done = latest(read_log(log))
    clean(cache)
    worker = worker or ExportWorker(timeout_s=timeout_s, mem_limit_mb=mem_limit_mb)
    bar = tqdm(todo, desc="exports", unit="model", smoothing=0.05)

    def do(j: Job, fallback: bool = False) -> dict:
        bar.set_postfix_str(f"{j.model}@{j.img_size} {j.exporter}")
        head: dict[str, Any] = {"model": j.model, "img_size": j.img_size, "exporter": j.exporter,
                                "group": j.group, "file": j.file, "fallback": fallback}
        entry: dict[str, Any]
        if j.params_m is not None and j.params_m > max_params_m:
            entry = {**head, "status": "skipped", "reason": f"{j.params_m:g} M parameters > "
                     f"{max_params_m:g} M: the export would need more memory than allowed"}
        else:
            answer = worker.run({"model": j.model, "img_size": j.img_size, "exporter": j.exporter,
                                 "out": str(cache / j.file), "batch": j.batch,
                                 "lean": (j.params_m or 0.0) > LEAN_PARAMS_M})
            entry = {**head, **answer}
            if entry["status"] != "ok":
                clean(cache)
        entry["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        _append(log, entry)
        ext = entry.get("extract") or {}
        tqdm.write(f"{entry['status']:7s} {j.exporter:11s} {j.model}@{j.img_size} "
                   f"{entry.get('seconds', 0):.0f}s {entry.get('reason') or ''}"
                   f"{' extract ' + ext['status'] if ext else ''}")
        return entry

    def fallback_of(j: Job, entry: dict) -> Job | None:
        twin = Job(j.model, j.img_size, "dynamo", j.batch, j.group, j.params_m)
        if j.exporter == "torchscript" and entry["status"] == "failed" \
                and not str(entry.get("reason")).startswith(NO_FALLBACK) \
                and twin.key not in queued and twin.key not in done:
            return twin
        return None

    # failures of earlier runs whose fallback has not been tried yet come first among them
    todo_keys = {j.key for j in todo}
    fallbacks = [t for j in jobs if j.key in done and j.key not in todo_keys
                 for t in [fallback_of(j, done[j.key])] if t is not None]
    try:
        for j in bar:
            entry = do(j)
            yield entry
            twin = fallback_of(j, entry)
            if twin is not None:
                fallbacks.append(twin)
        # the other exporter for what TorchScript failed on: last, it is ~5x slower
        room = len(fallbacks) if limit is None else max(0, limit - len(todo))
        for twin in tqdm(fallbacks[:room], desc="dynamo fallbacks", unit="model"):
            yield do(twin, fallback=True)
    finally:
        worker.close()

