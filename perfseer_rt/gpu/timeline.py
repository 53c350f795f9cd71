"""A kernel timeline: what utilization and power are computed from.

The latency predictor fills a :class:`KernelTimeline` (one row per kernel,
in schedule order); :mod:`perfseer_rt.gpu.utilization` and
:mod:`perfseer_rt.gpu.power` read it. Units: milliseconds, FLOPs, bytes,
CTAs (thread blocks; or output tiles of a GEMM).

:func:`host_gaps` turns a per-kernel host cost into the idle time the GPU
sees before each kernel (a launch queue: the host issues kernel ``i`` at
``c_i = c_(i-1) + host_ms``; the GPU starts it at
``max(c_i, end of kernel i-1)``), for callers that know the host cost but
not the gaps. :func:`grid_ctas` estimates a kernel's grid from its shape
where the caller has no grid of its own (tiles stated in its doc).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu.kernel_table import KernelTable

#: Kernel peaks (the kernel table's ``peak``) that run on tensor cores.
TENSOR_CORE_PEAKS = ("tf32", "fp16", "bf16")

#: GEMM output tile (rows x cols) per CTA assumed by :func:`grid_ctas`: cuBLAS/cuDNN's
#: common 128 x 128 tile; outputs under 1024 x 1024 elements per batch entry take 64 x 64.
GEMM_TILE = (128, 128)
SMALL_GEMM_TILE = (64, 64)
SMALL_GEMM_BELOW = 1024.0 * 1024.0
#: Elements per CTA of an element-wise / reduction kernel (256 threads x 4 elements each).
ELEMS_PER_CTA = 1024.0


@dataclass
class KernelTimeline:
    """Kernels of one call or training step, in schedule order.

    Attributes:
        family: kernel family per kernel (``conv``, ``linear``, ``bmm``,
            ``elem``, ``ln``, ``softmax``, ``memory``, ``optimizer``, ...).
        busy_ms: time the kernel runs on the GPU, ms.
        flops: floating-point operations of the kernel.
        bytes: DRAM bytes the kernel moves (reads + writes).
        ctas: grid size in CTAs (0: unknown, taken as filling the GPU).
        gap_ms: idle time before the kernel (host-side: launch, Python), ms.
        tensor_core: whether the kernel runs on tensor cores (its compute
            utilization is then against the tensor-core peak).
        ctas_per_sm: CTAs resident per SM (occupancy); 0: one.
    """

    family: list[str]
    busy_ms: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    ctas: np.ndarray
    gap_ms: np.ndarray
    tensor_core: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    ctas_per_sm: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: idle time after the last kernel of a step before the next step starts, ms
    tail_gap_ms: float = 0.0

    def __post_init__(self) -> None:
        n = len(self.family)
        for name in ("busy_ms", "flops", "bytes", "ctas", "gap_ms"):
            arr = np.asarray(getattr(self, name), dtype=np.float64)
            if arr.shape != (n,):
                raise PerfSeerError(f"KernelTimeline.{name}: {arr.shape[0] if arr.ndim else 0} values "
                                    f"for {n} kernels")
            if not np.isfinite(arr).all() or (arr < 0).any():
                raise PerfSeerError(f"KernelTimeline.{name}: values must be finite and >= 0")
            setattr(self, name, arr)
        self.tensor_core = (np.zeros(n, bool) if len(self.tensor_core) == 0
                            else np.asarray(self.tensor_core, bool))
        self.ctas_per_sm = (np.ones(n) if len(self.ctas_per_sm) == 0
                            else np.maximum(np.asarray(self.ctas_per_sm, np.float64), 1.0))
        if self.tensor_core.shape != (n,) or self.ctas_per_sm.shape != (n,):
            raise PerfSeerError("KernelTimeline.tensor_core / ctas_per_sm: one value per kernel")
        if self.tail_gap_ms < 0 or not math.isfinite(self.tail_gap_ms):
            raise PerfSeerError("KernelTimeline.tail_gap_ms must be finite and >= 0")

    def __len__(self) -> int:
        return len(self.family)

    @property
    def busy_total_ms(self) -> float:
        return float(self.busy_ms.sum())

    @property
    def total_ms(self) -> float:
        """Wall time of the call or step: kernels plus every gap."""
        return float(self.busy_ms.sum() + self.gap_ms.sum() + self.tail_gap_ms)

    def scaled(self, busy_factor: np.ndarray | float) -> "KernelTimeline":
        """The same timeline with each kernel's busy time multiplied."""
        return KernelTimeline(list(self.family), self.busy_ms * busy_factor, self.flops, self.bytes,
                              self.ctas, self.gap_ms, self.tensor_core, self.ctas_per_sm, self.tail_gap_ms)


def host_gaps(busy_ms: np.ndarray, host_ms: float | np.ndarray) -> np.ndarray:
    """Idle time before each kernel when the host needs ``host_ms`` to issue
    each one (see the module doc), ms."""
    busy = np.asarray(busy_ms, np.float64)
    host = np.broadcast_to(np.asarray(host_ms, np.float64), busy.shape)
    gaps = np.zeros_like(busy)
    issued = 0.0
    gpu_free = 0.0
    for i in range(len(busy)):
        issued += float(host[i])
        start = max(issued, gpu_free)
        gaps[i] = start - gpu_free if i else start
        gpu_free = start + float(busy[i])
    return gaps


def grid_ctas(family: str, m: float = 0.0, n: float = 0.0, batch: float = 1.0, elems: float = 0.0) -> float:
    """A kernel's grid in CTAs from its shape: GEMM-like families
    (``conv``, ``linear``, ``bmm``; ``m`` x ``n`` output per batch entry)
    one CTA per output tile (:data:`GEMM_TILE`, or :data:`SMALL_GEMM_TILE`
    for outputs under :data:`SMALL_GEMM_BELOW` elements), the rest one per
    :data:`ELEMS_PER_CTA` output elements. An ASSUMPTION: cuBLAS, cuDNN and
    PyTorch's kernels pick their own tiles; this is their common case."""
    if family in ("conv", "linear", "bmm"):
        tile = SMALL_GEMM_TILE if m * n < SMALL_GEMM_BELOW else GEMM_TILE
        return float(math.ceil(max(m, 1.0) / tile[0]) * math.ceil(max(n, 1.0) / tile[1]) * max(batch, 1.0))
    return float(max(math.ceil(elems / ELEMS_PER_CTA), 1))


def from_step(table: KernelTable, kernel_ms: np.ndarray, host_ms: np.ndarray, total_ms: float) -> KernelTimeline:
    """The timeline of the latency predictor's step (:mod:`perfseer_rt.gpu.step`):
    each kernel's busy time ``kernel_ms`` (ms) and family from ``table``;
    the idle time before each kernel from the host time before it
    (``host_ms``, :func:`host_gaps`), scaled so that the timeline lasts the
    step's predicted ``total_ms`` (ms); grids from the GEMM view (``m`` x
    ``n`` per batch entry) or the row view / bytes (:func:`grid_ctas`);
    tensor-core kernels where the kernel's peak is a tensor-core one."""
    busy = np.asarray(kernel_ms, np.float64)
    gaps = host_gaps(busy, host_ms) if len(busy) else np.zeros(0)
    idle = max(float(total_ms) - float(busy.sum()), 0.0)
    tail = 0.0
    if gaps.sum() > 0:
        gaps = gaps * (idle / float(gaps.sum()))
    else:
        tail = idle
    gemm = table["m"] > 0
    elems = np.where(table["rows"] > 0, table["rows"] * table["cols"], table["bytes"] / 8.0)
    ctas = np.array([grid_ctas("linear", m=float(m), n=float(n), batch=float(b)) if g
                     else grid_ctas("elem", elems=float(e))
                     for g, m, n, b, e in zip(gemm, table["m"], table["n"], table["batch"], elems)])
    return KernelTimeline([str(f) for f in table["family"]], busy, np.asarray(table["flops"], np.float64),
                          np.asarray(table["bytes"], np.float64), ctas, gaps,
                          tensor_core=np.isin(table["peak"], TENSOR_CORE_PEAKS), tail_gap_ms=tail)


def concat(parts: list[KernelTimeline], tail_gap_ms: float = 0.0) -> KernelTimeline:
    """Timelines run one after another (a training step's forward, loss,
    backward and optimizer kernels); the parts' tail gaps become gaps."""
    fam: list[str] = []
    arrays: dict[str, list[np.ndarray]] = {k: [] for k in ("busy_ms", "flops", "bytes", "ctas", "gap_ms",
                                                            "tensor_core", "ctas_per_sm")}
    carry = 0.0
    for p in parts:
        fam += p.family
        gaps = p.gap_ms.copy()
        if len(gaps):
            gaps[0] += carry
            carry = 0.0
        carry += p.tail_gap_ms
        for k in arrays:
            arrays[k].append(gaps if k == "gap_ms" else getattr(p, k))
    cat = {k: np.concatenate(v) if v else np.zeros(0) for k, v in arrays.items()}
    return KernelTimeline(fam, cat["busy_ms"], cat["flops"], cat["bytes"], cat["ctas"], cat["gap_ms"],
                          tensor_core=cat["tensor_core"].astype(bool), ctas_per_sm=cat["ctas_per_sm"],
                          tail_gap_ms=carry + tail_gap_ms)
