"""Records streamed to disk so that a command killed at any moment returns
what it measured.

``OUT/records-NN.jsonl``: one JSON record per line. Each record is appended
with one ``os.write`` of the whole line on an ``O_APPEND`` descriptor and then
``fsync``-ed, so a kill leaves every finished record on disk and at most one
torn last line (readers skip it and count it). Every process writes its own
shard (the next number after those in ``OUT``); a shard is closed and the
next one opened before it would pass ``max_bytes``; no more than
``max_files`` shards are made (the device tool returns at most 8 files of
16 MiB from ``$OUT``: the defaults keep 4 shards of at most 12 MiB beside the
run's 3 other files).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any, Iterator

SHARD_RE = re.compile(r"^records-(\d{2})\.jsonl$")
MAX_BYTES = 12 * 2**20
MAX_FILES = 4


class ShardsFull(RuntimeError):
    """No shard may be opened: ``max_files`` exist (or the next would pass the limits)."""


def shard_paths(out: Path) -> list[Path]:
    """The shards in ``out``, in order."""
    if not out.is_dir():
        return []
    return sorted(p for p in out.iterdir() if SHARD_RE.match(p.name))


def read_lines(path: Path) -> tuple[list[dict], int]:
    """Records of one JSONL file and the number of torn (unparseable) lines."""
    recs, torn = [], 0
    with open(path, "rb") as fh:
        for raw in fh:
            line = raw.strip()
            if not line:
                continue
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError:
                torn += 1
    return recs, torn


def read_records(out: Path) -> tuple[list[dict], int]:
    """Every record in ``out``'s shards, and how many torn lines were skipped."""
    recs: list[dict] = []
    torn = 0
    for p in shard_paths(out):
        r, t = read_lines(p)
        recs.extend(r)
        torn += t
    return recs, torn


def iter_shard_files(root: Path) -> Iterator[Path]:
    """Shards at or under ``root`` (a returned ``$OUT`` folder may be nested once)."""
    yield from sorted(p for p in root.rglob("records-*.jsonl") if SHARD_RE.match(p.name))


def finite(obj: Any) -> Any:
    """``obj`` with every NaN / infinite float replaced by None (JSON has neither)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def append_line(fd: int, data: bytes) -> None:
    """Write all of ``data`` (one line) and make it durable."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
    os.fsync(fd)


class ShardWriter:
    """Appends records to ``out``'s shards (see the module doc)."""

    def __init__(self, out: Path, max_bytes: int = MAX_BYTES, max_files: int = MAX_FILES) -> None:
        self.out = out
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.fd: int | None = None
        self.path: Path | None = None
        self.size = 0
        self.written = 0
        out.mkdir(parents=True, exist_ok=True)

    def _open_next(self) -> None:
        self.close()
        existing = shard_paths(self.out)
        if len(existing) >= self.max_files:
            raise ShardsFull(f"{len(existing)} shards in {self.out}: the most the run may return "
                             f"({self.max_files})")
        n = int(SHARD_RE.match(existing[-1].name).group(1)) + 1 if existing else 0  # type: ignore[union-attr]
        self.path = self.out / f"records-{n:02d}.jsonl"
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = 0

    def write(self, rec: dict[str, Any]) -> None:
        data = (json.dumps(finite(rec), sort_keys=True, allow_nan=False, default=str) + "\n").encode()
        if len(data) > self.max_bytes:
            raise ShardsFull(f"one record of {len(data)} bytes is over the shard limit {self.max_bytes}")
        if self.fd is None or self.size + len(data) > self.max_bytes:
            self._open_next()
        assert self.fd is not None
        append_line(self.fd, data)
        self.size += len(data)
        self.written += 1

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_json_atomic(path: Path, doc: Any) -> None:
    """Write ``doc`` as JSON to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True, default=str)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
