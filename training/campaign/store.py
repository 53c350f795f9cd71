"""The dataset folder a campaign writes and resumes (the layout
:mod:`training.seernet.data` reads)::

    OUT/records/part-00000.jsonl   one JSON record per configuration
    OUT/graphs/part-00000.npz      the PerfGraphs those records name (graph_key)
    OUT/campaign.json              settings and progress

Both files of the current shard are rewritten atomically after every record
(graphs first, then records), so a campaign killed at any moment leaves only
whole files; a new run appends new shards after the last one (of ``OUT`` and
of any ``resume`` folders, so shards returned from several machines never
collide). Done configurations are ``(arch_id, batch)`` pairs of non-reference
records; a record for a done pair is not written twice.

Guards: the records of one folder must share one peak-memory method
(:class:`MixedMethodsError`) and, for CPU targets, one CPU
(:class:`MixedCpuError`: ``cpu_model`` plus ``cpu_vendor``, ``cpu_family``
and ``cpu_model_id`` where both records have them).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.seernet.data import write_graph_shard

#: env keys that identify a CPU (compared where both records have them).
CPU_KEYS = ("cpu_model", "cpu_vendor", "cpu_family", "cpu_model_id")


class MixedMethodsError(ValueError):
    """A campaign would add records measured another way to a dataset."""


class MixedCpuError(ValueError):
    """A CPU campaign would add records measured on another CPU to a dataset."""


def iter_records(folder: Path) -> Iterator[dict]:
    """The records of a dataset folder in file order (a torn last line is skipped)."""
    for f in sorted((folder / "records").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue  # cut off when a run was killed mid-write


def dataset_folders(paths: Iterable[str | Path]) -> list[Path]:
    """Dataset folders (those with ``records/``) at or under ``paths``."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / "records").is_dir():
            out.append(p)
        elif p.is_dir():
            out += sorted(r.parent for r in p.rglob("records") if r.is_dir())
    return out


def cpu_signature(env: dict | None) -> dict:
    return {k: (env or {}).get(k) for k in CPU_KEYS if (env or {}).get(k) is not None}


def on_cpu(record: dict) -> bool:
    """Whether a record was measured on the CPU (records of the first builder
    carry no ``target``: they are CPU inference)."""
    return str(record.get("target") or "cpu-").startswith("cpu")


class Store:
    """A dataset folder opened for a campaign (see module doc).

    Args:
        out: the folder (created if new).
        resume: other dataset folders whose configurations count as done.
        shard_size: records per shard.
    """

    def __init__(self, out: str | Path, resume: Sequence[str | Path] = (), shard_size: int = 200):
        self.out = Path(out)
        for sub in ("records", "graphs"):
            (self.out / sub).mkdir(parents=True, exist_ok=True)
        self.shard_size = shard_size
        self.done: set[tuple[str, int]] = set()
        self.count = 0  # non-reference records
        self.methods: set[str] = set()
        self.cpu: dict = {}
        last = -1
        for folder in [self.out, *dataset_folders(resume)]:
            for f in (folder / "records").glob("*.jsonl"):
                m = re.fullmatch(r"part-(\d+)", f.stem)
                if m:
                    last = max(last, int(m.group(1)))
            for r in iter_records(folder):
                self._account(r)
        self.index = last + 1
        self._records: list[dict] = []
        self._keys: list[str] = []
        self._graphs: list = []

    def _account(self, r: dict) -> None:
        if not r.get("reference"):
            pair = (r["arch_id"], int(r["batch"]))
            if pair not in self.done:
                self.done.add(pair)
                self.count += 1
        if r.get("status") == "ok":
            method = (r.get("quality") or {}).get("peak_mem_method")
            if method:
                self.methods.add(method)
            if on_cpu(r):
                for k, v in cpu_signature(r.get("env")).items():
                    self.cpu.setdefault(k, v)

    def check(self, record: dict) -> None:
        """Raise if ``record`` does not belong with the folder's records."""
        if record.get("status") != "ok":
            return
        method = (record.get("quality") or {}).get("peak_mem_method")
        if method and self.methods - {method}:
            raise MixedMethodsError(
                f"{self.out}: its records measured peak memory as "
                f"{', '.join(sorted(self.methods))}, this run as {method} "
                "(perfseer_rt.profile.hostmem); the two do not mix: build a new dataset folder")
        if on_cpu(record):
            sig = cpu_signature(record.get("env"))
            diff = {k: (self.cpu[k], v) for k, v in sig.items() if k in self.cpu and self.cpu[k] != v}
            if diff:
                what = ", ".join(f"{k} {a!r} vs {b!r}" for k, (a, b) in diff.items())
                raise MixedCpuError(f"{self.out}: its records were measured on another CPU "
                                    f"({what}); CPU timings do not mix: build a new dataset folder")

    def is_done(self, arch_id: str, batch: int) -> bool:
        return (arch_id, int(batch)) in self.done

    def write(self, record: dict, graph=None) -> bool:
        """Append one record (and its graph); False when its configuration was
        already recorded (a re-sent result), True when written."""
        if not record.get("reference") and self.is_done(record["arch_id"], record["batch"]):
            return False
        self.check(record)
        key = record.get("graph_key")
        if graph is not None and key and key not in self._keys:
            self._keys.append(key)
            self._graphs.append(graph)
            write_graph_shard(self._path("graphs", "npz"), self._keys, self._graphs)
        self._records.append(record)
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in self._records)
        atomic_write_bytes(self._path("records", "jsonl"), text.encode())
        self._account(record)
        if len(self._records) >= self.shard_size:
            self.index += 1
            self._records, self._keys, self._graphs = [], [], []
        return True

    def _path(self, sub: str, ext: str) -> Path:
        return self.out / sub / f"part-{self.index:05d}.{ext}"

    def save_campaign(self, state: str, settings: dict) -> None:
        doc = {"settings": settings, "state": state, "configurations": self.count,
               "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        atomic_write_bytes(self.out / "campaign.json", json.dumps(doc, indent=2, default=str).encode())
