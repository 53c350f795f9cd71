"""Kernel times from the prior: a :class:`~perfseer_rt.gpu.kernel_table.KernelTable`
priced on a spec sheet.

Each kernel is priced by its prior family (:data:`kernel_table.CLASSES`)
with the spec sheet's peak replaced by the peak of the math it runs on
(:meth:`GpuSpec.peak_gflops`): the NeuSight prior was fitted on fp32 kernels,
so a tensor-core kernel is taken to reach the same fraction of its roofline
as an fp32 kernel of its shape reaches of the fp32 one (an assumption the
learned layer, :mod:`perfseer_rt.gpu.learned`, corrects). A kernel that
stands for part of a launch (``launches`` < 1) pays that part of the launch
overhead.
"""

from __future__ import annotations

import numpy as np

from perfseer_rt.gpu import features as F
from perfseer_rt.gpu.kernel_table import KernelTable
from perfseer_rt.gpu.prior import Prior
from perfseer_rt.gpu.specs import GpuSpec

PEAKS = ("fp32", "tf32", "fp16", "bf16", "none")
GEMM_KEYS = ("batch", "m", "n", "k")
ROW_KEYS = ("rows", "cols", "binary", "transcendental")


def peak_array(table: KernelTable, spec: GpuSpec) -> np.ndarray:
    """GFLOP/s each kernel's math runs at (fp32 for memory-bound kernels)."""
    out = np.full(len(table), float(spec.fp32_gflops))
    for peak in ("tf32", "fp16", "bf16"):
        sel = table["peak"] == peak
        if sel.any():
            out[sel] = spec.peak_gflops(peak)
    return out


def spec_rows(spec: GpuSpec, peaks: np.ndarray) -> dict[str, np.ndarray]:
    """The prior's spec arrays, one row per kernel, the peak per kernel."""
    arr = F.spec_arrays(spec, len(peaks))
    arr["fp32_gflops"] = peaks.astype(np.float64)
    return arr


def price(table: KernelTable, spec: GpuSpec, prior: Prior, launch_ms: float) -> np.ndarray:
    """Prior ms of every kernel of ``table`` on ``spec`` (``launch_ms`` per
    launch, scaled by the kernel's ``launches``)."""
    out = np.zeros(len(table))
    if not len(table):
        return out
    peaks = peak_array(table, spec)
    fam = table["family"]
    for family in np.unique(fam):
        sel = fam == family
        shape = {"flops": table["flops"][sel], "bytes": np.maximum(table["bytes"][sel], 1.0)}
        keys = GEMM_KEYS if family in F.GEMM_FAMILIES else ROW_KEYS if family in F.ROW_FAMILIES else ()
        for key in keys:
            v = table[key][sel]
            shape[key] = np.maximum(v, 1.0) if key not in ("binary", "transcendental") else v
        ms = prior.kernel_ms(str(family), shape, spec_rows(spec, peaks[sel]), 0.0)
        out[sel] = ms + launch_ms * table["launches"][sel]
    return out


def roofline(table: KernelTable, spec: GpuSpec) -> tuple[np.ndarray, np.ndarray]:
    """(compute ms, memory ms) of every kernel at its peak and the
    bandwidth: the roofline's two sides."""
    peaks = peak_array(table, spec)
    flops = np.where(table["family"] == "memory", 0.0, table["flops"])
    return flops / (peaks * 1e9) * 1e3, table["bytes"] / (spec.mem_bw_gbs * 1e9) * 1e3
