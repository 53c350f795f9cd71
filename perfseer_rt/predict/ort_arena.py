"""onnxruntime's CPU activation memory while a model runs, simulated from a PerfGraph.

The run phase of a CPU measurement (``perfseer_rt.profile``: ``run_peak_mb``
over ``loaded_mb``) is what onnxruntime's arena makes resident for the
activations. It is not the live-activation peak (``act_live_peak``): over
the training configurations the ratio runs from 0.9 to 3.5 between
architectures while it stays within 1 % across one architecture's batch
sizes (``reports/cpu-calibrate``). Three mechanisms make it, and this module
replays each on the graph:

1. **The plan** (:func:`plan_buffers`): which node outputs get a buffer of
   their own. View operators (:data:`~perfseer_rt.graph.structure.VIEW_OPS`)
   alias their input; a BatchNormalization or activation that alone reads a
   convolution is fused into it (onnxruntime folds and fuses them); an
   ``Add`` of a convolution's output is fused too, the convolution writing
   into the other operand's buffer when that operand dies there (the CPU
   provider's "Sum" fusion); an element-wise operator writes in place into an
   input of its own size that dies at it.
2. **The first run** (:class:`Arena`): every buffer is allocated and freed
   one by one from a best-fit arena with coalescing, grown in regions of
   doubling size, as onnxruntime's BFC arena does (``kNextPowerOfTwo``,
   first region 1 MiB, chunks split only when at least twice the request).
   Only the pages a tensor writes become resident.
3. **The memory pattern** (:func:`pattern_block`): from the second run on,
   onnxruntime places all activations in one block at offsets planned
   best-fit over their lifetimes, and takes that block from the arena; where
   no free chunk is large enough, a new region is made resident.

:func:`footprint` returns the three sizes in bytes; the device's fitted
scale turns the resident bytes into MiB of run phase
(:mod:`perfseer_rt.predict.run_memory`). Node order is the PerfGraph's
(topological) order; an output's bytes are ``out_elems`` times its element
size, as in :func:`perfseer_rt.graph.structure.activation_bytes`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from perfseer_rt.graph import layout
from perfseer_rt.graph.structure import VIEW_OPS
from perfseer_rt.predict.domain import ops_of_onehot

_N = layout.column_index(layout.NODE_COLUMNS)
_E = layout.column_index(layout.EDGE_COLUMNS)
#: Operators onnxruntime fuses into the convolution they alone read.
FUSED_INTO_CONV = frozenset({"BatchNormalization", "Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip",
                             "HardSigmoid"})
#: Element-wise operators whose output may take the buffer of an input that dies at them.
IN_PLACE = frozenset({"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish",
                      "Gelu", "Erf", "Sqrt", "PRelu", "Add", "Sub", "Mul", "Div", "Pow"})
FIRST_REGION = 1 << 20      #: bytes of the arena's first region
MAX_DOUBLING = 1 << 30      #: regions stop doubling past this (bytes)
MIN_CHUNK = 256             #: allocation granularity (bytes)
PAGE = 4096                 #: bytes per resident page
PATTERN_ALIGN = 64          #: alignment of an offset in the memory pattern (bytes)


@dataclass(frozen=True)
class Buffers:
    """The plan: one row per buffer. ``size`` bytes; alive from node
    ``start`` through node ``end`` (``end`` = node count: to the end)."""

    size: np.ndarray
    start: np.ndarray
    end: np.ndarray
    nodes: int


@dataclass(frozen=True)
class Footprint:
    """Bytes of the simulated run phase: ``first_run`` resident after the
    first run, ``pattern`` the memory-pattern block, ``resident`` after the
    block was taken from the arena (what the run phase holds)."""

    first_run: float
    pattern: float
    resident: float


def plan_buffers(x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray) -> Buffers:
    """The buffers onnxruntime's plan gives the graph's node outputs (module doc, 1)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1, len(layout.NODE_COLUMNS))
    ei = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    ea = np.asarray(edge_attr, dtype=np.float64).reshape(-1, len(layout.EDGE_COLUMNS))
    n = len(x)
    item = np.full(n, 4.0)
    item[ei[0]] = ea[:, _E["dtype_bytes"]]
    size = (x[:, _N["out_elems"]] * item).tolist()
    ops = ops_of_onehot(x)
    readers: list[set[int]] = [set() for _ in range(n)]
    inputs: list[list[int]] = [[] for _ in range(n)]
    for s, d in zip(ei[0].tolist(), ei[1].tolist()):
        if s not in inputs[d]:
            inputs[d].append(s)
        readers[s].add(d)
    last = [max(r) if r else n for r in readers]
    owner = list(range(n))      # node -> buffer (a node id); followed to its root by find()
    end: dict[int, int] = {}    # buffer -> last node it is alive at
    fused: set[int] = set()     # nodes that are a convolution with what was fused into it

    def find(i: int) -> int:
        while owner[i] != i:
            owner[i] = owner[owner[i]]
            i = owner[i]
        return i

    def alias(i: int, b: int) -> None:
        owner[i] = b
        end[b] = max(end[b], last[i])

    for i in range(n):
        op, ins = ops[i], sorted(inputs[i])
        if op in VIEW_OPS and ins:
            alias(i, find(ins[0]))
            continue
        if op in FUSED_INTO_CONV and len(ins) == 1 and ins[0] in fused and readers[ins[0]] == {i}:
            alias(i, find(ins[0]))
            fused.add(i)
            continue
        if op == "Add" and len(ins) == 2:
            convs = [q for q in ins if q in fused and readers[q] == {i}]
            if convs:
                conv = convs[-1]
                cb, ob = find(conv), find(next(q for q in ins if q != conv))
                if ob != cb and end.get(ob, n) <= i and size[ob] == size[cb]:
                    owner[cb] = ob      # the convolution accumulates into the residual's buffer
                    del end[cb]
                    end[ob] = max(end[ob], last[conv])
                alias(i, find(conv))
                fused.add(i)
                continue
        if op in IN_PLACE:
            b = next((find(p) for p in ins if end.get(find(p), n) <= i and size[find(p)] == size[i]), None)
            if b is not None:
                alias(i, b)
                continue
        end[i] = last[i]
        if op == "Conv":
            fused.add(i)
    roots = sorted(end)
    return Buffers(size=np.array([size[b] for b in roots], dtype=np.float64),
                   start=np.array(roots, dtype=np.int64),
                   end=np.array([min(end[b], n) for b in roots], dtype=np.int64), nodes=n)


def events(buffers: Buffers) -> list[tuple[int, bool, int]]:
    """``(node, is_free, buffer)`` in run order: at each node its new
    buffers are allocated, then the buffers it was the last to read freed."""
    ev = [(int(s), False, j) for j, s in enumerate(buffers.start)]
    ev += [(int(e), True, j) for j, e in enumerate(buffers.end)]
    return sorted(ev)


def pattern_block(buffers: Buffers) -> float:
    """Bytes of the memory-pattern block: each allocation at the start of the
    smallest gap between live blocks that holds it, else after the last."""
    live: list[tuple[int, int, int]] = []   # (offset, size, buffer), sorted by offset
    where: dict[int, tuple[int, int, int]] = {}
    peak = 0
    for _, free, j in events(buffers):
        if free:
            if j in where:
                live.remove(where.pop(j))
            continue
        need = int(-(-buffers.size[j] // PATTERN_ALIGN) * PATTERN_ALIGN)
        if need <= 0:
            continue
        best, waste, cur = None, None, 0
        for off, sz, _ in live:
            gap = off - cur
            if gap >= need and (waste is None or gap - need < waste):
                best, waste = cur, gap - need
            cur = max(cur, off + sz)
        block = (cur if best is None else best, need, j)
        bisect.insort(live, block)
        where[j] = block
        peak = max(peak, block[0] + need)
    return float(peak)


class Arena:
    """A best-fit arena of regions (module doc, 2); :meth:`resident` counts
    the pages allocations have written."""

    def __init__(self) -> None:
        self._next_region = FIRST_REGION
        self._top = 0
        self._free: list[tuple[int, int]] = []            # (size, base) of free chunks
        self._chunk: dict[int, list[int]] = {}            # base -> [size, free, prev base, next base]
        self._pages: list[tuple[int, np.ndarray]] = []    # (region base, written pages)

    def _grow(self, need: int) -> None:
        doubled = False
        while need > self._next_region:
            self._next_region *= 2
            doubled = True
        size, base = self._next_region, self._top
        self._top += size + PAGE       # regions never touch: chunks coalesce only within one
        self._pages.append((base, np.zeros(-(-size // PAGE), dtype=bool)))
        self._chunk[base] = [size, 1, -1, -1]
        bisect.insort(self._free, (size, base))
        if not doubled and self._next_region * 2 <= MAX_DOUBLING:
            self._next_region *= 2

    def allocate(self, nbytes: float) -> int:
        """Base address of a new allocation of ``nbytes``; its pages become resident."""
        need = max(MIN_CHUNK, int(-(-nbytes // MIN_CHUNK) * MIN_CHUNK))
        k = bisect.bisect_left(self._free, (need, -1))
        if k == len(self._free):
            self._grow(need)
            k = bisect.bisect_left(self._free, (need, -1))
        size, base = self._free.pop(k)
        c = self._chunk[base]
        if size >= 2 * need:
            rest = base + need
            self._chunk[rest] = [size - need, 1, base, c[3]]
            if c[3] >= 0:
                self._chunk[c[3]][2] = rest
            c[0], c[3] = need, rest
            bisect.insort(self._free, (size - need, rest))
        c[1] = 0
        self._touch(base, int(nbytes))
        return base

    def _touch(self, base: int, nbytes: int) -> None:
        k = bisect.bisect_right([b for b, _ in self._pages], base) - 1
        rbase, pages = self._pages[k]
        pages[(base - rbase) // PAGE:-(-(base - rbase + nbytes) // PAGE)] = True

    def release(self, base: int) -> None:
        """Free the allocation at ``base``, merging it with free neighbours."""
        c = self._chunk[base]
        c[1] = 1
        nxt = c[3]
        if nxt >= 0 and self._chunk[nxt][1]:
            self._unfree(nxt)
            n = self._chunk.pop(nxt)
            c[0] += n[0]
            c[3] = n[3]
            if n[3] >= 0:
                self._chunk[n[3]][2] = base
        prv = c[2]
        if prv >= 0 and self._chunk[prv][1]:
            self._unfree(prv)
            p = self._chunk[prv]
            p[0] += c[0]
            p[3] = c[3]
            if c[3] >= 0:
                self._chunk[c[3]][2] = prv
            del self._chunk[base]
            base, c = prv, p
        bisect.insort(self._free, (c[0], base))

    def _unfree(self, base: int) -> None:
        self._free.pop(bisect.bisect_left(self._free, (self._chunk[base][0], base)))

    def regions(self) -> list[int]:
        """Sizes of the regions grown so far, in order, bytes."""
        return [len(pages) * PAGE for _, pages in self._pages]

    def resident(self) -> float:
        """Bytes of the pages written so far."""
        return float(sum(int(p.sum()) for _, p in self._pages) * PAGE)


def footprint(x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray) -> Footprint:
    """The simulated run phase of a graph's arrays (module doc), bytes."""
    return replay(plan_buffers(x, edge_index, edge_attr))


def replay(buffers: Buffers) -> Footprint:
    """A plan's first run through :class:`Arena`, then its memory-pattern
    block taken from that arena (module doc, 2 and 3), bytes."""
    arena = Arena()
    at: dict[int, int] = {}
    for _, free, j in events(buffers):
        if buffers.size[j] <= 0:
            continue
        if free:
            arena.release(at.pop(j))
        else:
            at[j] = arena.allocate(buffers.size[j])
    first = arena.resident()
    block = pattern_block(buffers)
    if block > 0:
        arena.release(arena.allocate(block))
    return Footprint(first_run=first, pattern=block, resident=arena.resident())
