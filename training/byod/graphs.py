"""Models named in a CSV -> PerfGraphs, cached on disk.

A model entry is a path to an ONNX file (relative to the CSV's folder), a
zoo spec string (``nb201:<cell>``, ``resnet:depth=50,...``), or
``nb201-eager:<cell>``: a NAS-Bench-201 network as its PyTorch code executes
it (:mod:`training.byod.nb201_eager`). A zoo spec
is exported once per architecture (dynamic batch axis, structure only) into
the cache and extracted at every batch size asked for; every extracted graph
is stored as ``<cache>/graphs/<key>.npz`` where ``key`` hashes the canonical
spec (or the ONNX file's bytes), the batch size and the feature layout
version. A repeated run reads the ``.npz`` files and exports nothing.

The default cache, ``training/byod/.cache/``, is git-ignored.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from perfseer_rt.graph import PerfGraph, extract, layout
from training.byod import nb201_eager
from training.byod.strip import strip_file
from training.zoo import export_onnx, family_names, parse_spec, to_spec

DEFAULT_CACHE = Path(__file__).resolve().parent / ".cache"


@dataclass(frozen=True)
class ModelRef:
    """One model of a CSV, resolved: ``kind`` is ``"zoo"``, ``"onnx"`` or ``"nb201-eager"``.

    Attributes:
        kind: ``"zoo"`` (``text`` is the canonical spec), ``"onnx"``
            (``text`` is the absolute path) or ``"nb201-eager"`` (``text`` is
            ``nb201-eager:<cell>``, see :mod:`training.byod.nb201_eager`).
        text: canonical spec or absolute ONNX path.
        arch_id: zoo architecture id, or the sha256 prefix of the ONNX bytes.
        family: zoo family, or ``"onnx"``.
    """

    kind: str
    text: str
    arch_id: str
    family: str

    def key(self, batch: int) -> str:
        """Cache key of this model at ``batch`` (hex)."""
        raw = f"{layout.FEATURE_VERSION}|{self.kind}|{self.arch_id}|{self.text if self.kind != 'onnx' else ''}|b{batch}"
        return hashlib.sha256(raw.encode()).hexdigest()[:24]


def looks_like_spec(text: str) -> bool:
    """A zoo spec (``family:...`` or config JSON) rather than a file path."""
    t = text.strip()
    if t.startswith("{"):
        return True
    head, sep, _ = t.partition(":")
    return bool(sep) and head.strip().lower() in family_names()


def resolve(text: str, base: Path) -> ModelRef:
    """Resolve one CSV model entry.

    Raises:
        ValueError: not a zoo spec and no such ONNX file (the caller adds the row);
            a bad spec raises the zoo's ``SpecError`` (a ``ValueError``).
    """
    t = text.strip()
    if t.startswith(nb201_eager.PREFIX + ":"):
        cell = nb201_eager.canonical(t.partition(":")[2])
        return ModelRef("nb201-eager", f"{nb201_eager.PREFIX}:{cell}", nb201_eager.arch_id(cell), "nb201")
    if looks_like_spec(t):
        cfg = parse_spec(t)
        return ModelRef("zoo", to_spec(cfg), cfg.arch_id, cfg.family)
    path = Path(t)
    if not path.is_absolute():
        path = base / path
    head, sep, _ = t.partition(":")
    if not path.is_file() and sep and head.isidentifier():
        parse_spec(t)  # "family:..." with an unknown family: the zoo's error lists the families
    if not path.is_file():
        hint = (" A column of bare NAS-Bench-201 cell strings takes --model-format 'nb201:{}'."
                if t.startswith("|") else "")
        raise FileNotFoundError(f"no ONNX file {str(path)!r} and not a zoo spec (zoo specs read "
                                f"FAMILY:..., e.g. nb201:|nor_conv_3x3~0|+|...|).{hint}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return ModelRef("onnx", str(path.resolve()), digest, "onnx")


class GraphCache:
    """PerfGraphs of models at batch sizes, computed once and kept on disk."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root else DEFAULT_CACHE
        (self.root / "graphs").mkdir(parents=True, exist_ok=True)
        (self.root / "onnx").mkdir(parents=True, exist_ok=True)
        self.exports = 0          # zoo exports done by this object
        self.export_seconds = 0.0
        self.extracts = 0
        self._zoo_strip_ok = True

    def graph_path(self, ref: ModelRef, batch: int) -> Path:
        return self.root / "graphs" / f"{ref.key(batch)}.npz"

    def has(self, ref: ModelRef, batch: int) -> bool:
        return self.graph_path(ref, batch).is_file()

    def get(self, ref: ModelRef, batch: int) -> PerfGraph:
        """The PerfGraph of ``ref`` at ``batch`` (extracted on a cache miss)."""
        path = self.graph_path(ref, batch)
        if path.is_file():
            return PerfGraph.load_npz(path)
        graph = extract(str(self._onnx_file(ref)), batch=batch)
        self.extracts += 1
        graph.save_npz(path)
        return graph

    def ensure(self, pairs: Iterable[tuple[ModelRef, int]],
               progress: Callable[[int, int, float], None] | None = None) -> None:
        """Make sure every ``(model, batch)`` is cached; ``progress(done, todo,
        seconds)`` is called after each model."""
        todo: dict[ModelRef, set[int]] = {}
        for ref, b in pairs:
            if not self.has(ref, b):
                todo.setdefault(ref, set()).add(int(b))
        start = time.perf_counter()
        for i, (ref, batches) in enumerate(todo.items(), start=1):
            for b in sorted(batches):
                self.get(ref, b)
            if progress:
                progress(i, len(todo), time.perf_counter() - start)

    def _onnx_file(self, ref: ModelRef) -> Path:
        """The ONNX file to extract: the user's, or the zoo's export (cached)."""
        if ref.kind == "onnx":
            return Path(ref.text)
        path = self.root / "onnx" / (f"{ref.arch_id}.onnx" if ref.kind == "zoo" else f"{ref.kind}-{ref.arch_id}.onnx")
        if not path.is_file():
            self._export(ref, path)
        return path

    def _export(self, ref: ModelRef, path: Path) -> None:
        t0 = time.perf_counter()
        if ref.kind == "nb201-eager":
            with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
                out = nb201_eager.export(ref.text.partition(":")[2], Path(tmp) / path.name)
                os.replace(out, path)
            self.exports += 1
            self.export_seconds += time.perf_counter() - t0
            return
        cfg = parse_spec(ref.text)
        # Export beside the target and rename, so a cut-off run leaves no
        # half-written file in the cache.
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            out = Path(tmp) / path.name
            if self._zoo_strip_ok:
                try:
                    export_onnx(cfg, out, structure_only=True)
                except ValueError as exc:
                    if "raw_data" not in str(exc):
                        raise
                    self._zoo_strip_ok = False  # see training.byod.strip
            if not self._zoo_strip_ok:
                export_onnx(cfg, out)
                strip_file(out)
            os.replace(out, path)
        self.exports += 1
        self.export_seconds += time.perf_counter() - t0


def print_progress(label: str, every: int = 50) -> Callable[[int, int, float], None]:
    """A progress callback printing one line every ``every`` models to stderr."""
    def show(done: int, total: int, seconds: float) -> None:
        if done == total or done % every == 0:
            rate = seconds / max(done, 1)
            print(f"[{label}] {done}/{total} models built, {seconds:.0f} s "
                  f"({rate:.2f} s each, ~{rate * (total - done):.0f} s left)", file=sys.stderr, flush=True)
    return show


def graphs_for(refs: Sequence[ModelRef], batches: Sequence[int], cache: GraphCache,
               label: str = "graphs") -> list[PerfGraph]:
    """PerfGraphs of ``refs[i]`` at ``batches[i]``, building what is missing."""
    cache.ensure(zip(refs, batches), print_progress(label))
    return [cache.get(r, int(b)) for r, b in zip(refs, batches)]
