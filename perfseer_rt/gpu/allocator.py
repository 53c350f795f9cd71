"""PyTorch's CUDA caching allocator, simulated over an allocation/free trace.

What ``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` report
depends on the allocator's rules, not only on the bytes tensors ask for. The
rules below follow ``c10/cuda/CUDACachingAllocator.cpp`` (PyTorch 2.x, read
from the public source; default configuration: no ``max_split_size_mb``, no
``roundup_power2_divisions``, no ``expandable_segments``, one stream):

* every request is rounded up to a multiple of 512 bytes (``kMinBlockSize``;
  at least 512);
* requests of at most 1 MiB (``kSmallSize``) are served from the small pool,
  larger ones from the large pool;
* a request no free cached block can hold opens a new segment
  (``cudaMalloc``): 2 MiB (``kSmallBuffer``) for small requests, 20 MiB
  (``kLargeBuffer``) for requests between 1 and 10 MiB (``kMinLargeAlloc``),
  else the request rounded up to 2 MiB (``kRoundLarge``);
* a free block is found best-fit (the smallest cached block of the pool that
  holds the request);
* a block is split when the remainder is at least 512 bytes (small pool) or
  more than 1 MiB (large pool); otherwise the whole block is handed out and
  counted as allocated;
* a freed block merges with free neighbours of its segment and returns to
  its pool; segments are never given back (no ``empty_cache``), except when a
  ``cudaMalloc`` would exceed ``capacity_bytes``: then free whole segments
  are released and the call retried, as the allocator does before raising an
  out-of-memory error.

``allocated`` counts block sizes (rounded, whole unsplit blocks), which is
what ``torch.cuda.memory_allocated`` reports; ``reserved`` counts segments
(``torch.cuda.memory_reserved``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

#: Constants of CUDACachingAllocator.cpp (bytes).
K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 << 20
K_SMALL_BUFFER = 2 << 20
K_LARGE_BUFFER = 20 << 20
K_MIN_LARGE_ALLOC = 10 << 20
K_ROUND_LARGE = 2 << 20


def round_size(nbytes: int) -> int:
    """A request's size as the allocator books it (``round_size``)."""
    if nbytes < K_MIN_BLOCK:
        return K_MIN_BLOCK
    return K_MIN_BLOCK * ((nbytes + K_MIN_BLOCK - 1) // K_MIN_BLOCK)


def segment_size(rounded: int) -> int:
    """Bytes of the segment a new ``cudaMalloc`` takes for a rounded request
    (``get_allocation_size``)."""
    if rounded <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if rounded < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((rounded + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


def is_small(rounded: int) -> bool:
    """Whether a rounded request is served from the small pool."""
    return rounded <= K_SMALL_SIZE


class OutOfMemory(Exception):
    """A request that no segment could hold within ``capacity_bytes``."""


@dataclass(eq=False)
class _Block:
    segment: int
    offset: int
    size: int
    small: bool
    allocated: bool = False
    prev: "_Block | None" = None
    next: "_Block | None" = None


@dataclass
class CachingAllocator:
    """The allocator's state; ``malloc`` / ``free`` follow the module's rules.

    ``capacity_bytes``: memory the allocator may reserve (None: unlimited).
    """

    capacity_bytes: float | None = None
    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    requested: int = 0
    segments: int = 0
    _pools: dict[bool, list[tuple[int, int, int, int]]] = field(default_factory=lambda: {True: [], False: []})
    _blocks: dict[int, _Block] = field(default_factory=dict)     #: id(block) -> block (free ones)
    _seg_sizes: dict[int, int] = field(default_factory=dict)
    _live: dict[object, _Block] = field(default_factory=dict)    #: caller's key -> its block
    _asked: dict[object, int] = field(default_factory=dict)      #: caller's key -> bytes asked

    # ------------------------------------------------------------- pools
    def _insert(self, b: _Block) -> None:
        self._blocks[id(b)] = b
        bisect.insort(self._pools[b.small], (b.size, b.segment, b.offset, id(b)))

    def _remove(self, b: _Block) -> None:
        pool = self._pools[b.small]
        i = bisect.bisect_left(pool, (b.size, b.segment, b.offset, id(b)))
        del pool[i]
        del self._blocks[id(b)]

    def _best_fit(self, size: int, small: bool) -> _Block | None:
        pool = self._pools[small]
        i = bisect.bisect_left(pool, (size, -1, -1, -1))
        if i == len(pool):
            return None
        b = self._blocks[pool[i][3]]
        self._remove(b)
        return b

    def _release_free_segments(self) -> None:
        """Give back every segment that is one free block (OOM retry)."""
        for small in (True, False):
            for entry in list(self._pools[small]):
                b = self._blocks[entry[3]]
                if b.prev is None and b.next is None:
                    self._remove(b)
                    self.reserved -= b.size
                    del self._seg_sizes[b.segment]

    # ------------------------------------------------------------ public
    def malloc(self, key: object, nbytes: int) -> None:
        """Allocate ``nbytes`` for ``key`` (a name the caller frees by).

        Raises:
            OutOfMemory: the request does not fit ``capacity_bytes``.
        """
        size = round_size(int(nbytes))
        small = is_small(size)
        b = self._best_fit(size, small)
        if b is None:
            seg = segment_size(size)
            if self.capacity_bytes is not None and self.reserved + seg > self.capacity_bytes:
                self._release_free_segments()
                if self.reserved + seg > self.capacity_bytes:
                    raise OutOfMemory(f"{seg} bytes more than the {self.capacity_bytes:.0f} bytes available")
            self.segments += 1
            b = _Block(self.segments, 0, seg, small)
            self._seg_sizes[b.segment] = seg
            self.reserved += seg
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        rest = b.size - size
        if (rest >= K_MIN_BLOCK) if small else (rest > K_SMALL_SIZE):
            tail = _Block(b.segment, b.offset + size, rest, small, prev=b, next=b.next)
            if b.next is not None:
                b.next.prev = tail
            b.next = tail
            b.size = size
            self._insert(tail)
        b.allocated = True
        self._live[key] = b
        self.allocated += b.size
        self.requested += int(nbytes)
        self._asked[key] = int(nbytes)
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, key: object) -> None:
        """Free ``key``'s block (merging it with free neighbours)."""
        b = self._live.pop(key)
        self.allocated -= b.size
        self.requested -= self._asked.pop(key)
        b.allocated = False
        for side in ("prev", "next"):
            n = getattr(b, side)
            if n is not None and not n.allocated:
                self._remove(n)
                if side == "prev":
                    b.offset, b.prev = n.offset, n.prev
                    if n.prev is not None:
                        n.prev.next = b
                else:
                    b.next = n.next
                    if n.next is not None:
                        n.next.prev = b
                b.size += n.size
        self._insert(b)

    def largest_free_block(self) -> int:
        """Bytes of the largest cached free block (``cacheInfo``)."""
        sizes = [p[-1][0] for p in self._pools.values() if p]
        return max(sizes) if sizes else 0

    def reset_peaks(self) -> None:
        """As ``torch.cuda.reset_peak_memory_stats``."""
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved


def replay(events: Iterable[tuple[str, object, int]], capacity_bytes: float | None = None,
           reset_at: int | None = None) -> CachingAllocator:
    """Run ``(kind, key, nbytes)`` events (``kind`` ``"+"`` or ``"-"``)
    through a fresh allocator; ``reset_at``: index of the event before which
    the peaks are reset (to measure a steady step after warm-up ones).

    Raises:
        OutOfMemory: as :meth:`CachingAllocator.malloc`.
    """
    a = CachingAllocator(capacity_bytes=capacity_bytes)
    for i, (kind, key, nbytes) in enumerate(events):
        if reset_at is not None and i == reset_at:
            a.reset_peaks()
        if kind == "+":
            a.malloc(key, nbytes)
        else:
            a.free(key)
    return a
