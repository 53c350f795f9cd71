"""What the learned whole-model layer sees of each kernel: the one source of
truth for training (``training/gpulearned``) and the runtime
(:mod:`perfseer_rt.gpu.learned`).

Every feature is a kernel quantity or a kernel quantity *relative to the
device* (its roofline times at the peak of its math, waves of tiles over
the SMs, bytes over L2), never a device identity, so that a GPU known only
from its spec sheet gets an answer: the layer predicts ``log(kernel ms /
roofline ms)`` for each kernel, and the step is the sum (see
:mod:`perfseer_rt.gpu.step`).

Units: times in microseconds before the log; sizes are counts (elements,
tiles) or bytes as named.
"""

from __future__ import annotations

import numpy as np

from perfseer_rt.gpu.kernel_table import CLASSES, KernelTable
from perfseer_rt.gpu.pricing import peak_array
from perfseer_rt.gpu.specs import GpuSpec

FEATURE_VERSION = "gpu-kernel-1"
CLASS_NAMES = tuple(CLASSES)
PEAK_NAMES = ("fp32", "tf32", "fp16", "bf16", "none")
PHASE_NAMES = ("forward", "backward", "loss", "optimizer")
#: Output tile side (elements) of the GEMM wave features (a common
#: tensor-core CTA tile).
TILE = 128


def names() -> list[str]:
    """Feature names in column order."""
    return ([f"cls_{c}" for c in CLASS_NAMES] + [f"peak_{p}" for p in PEAK_NAMES]
            + [f"phase_{p}" for p in PHASE_NAMES]
            + ["nhwc", "nhwc_x_conv", "half_bytes", "log10_tc_us", "log10_tm_us", "log2_tc_over_tm",
               "log2_bytes_over_l2", "log2_m", "log2_n", "log2_k", "log2_batch", "log2_waves",
               "wave_eff", "tile_eff", "align8_k", "align8_n", "log2_cols", "log2_rows",
               "log2_per_group", "transcendental", "binary"])


def _log2(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.log2(np.maximum(x, 1.0)))


def roofline_ms(table: KernelTable, spec: GpuSpec) -> tuple[np.ndarray, np.ndarray]:
    """(compute ms at the kernel's peak, memory ms at the bandwidth)."""
    peaks = peak_array(table, spec)
    flops = np.where(table["family"] == "memory", 0.0, table["flops"])
    return flops / (peaks * 1e9) * 1e3, table["bytes"] / (spec.mem_bw_gbs * 1e9) * 1e3


def features(table: KernelTable, spec: GpuSpec, layout: str, half: bool) -> np.ndarray:
    """``float32[K, len(names())]`` for the ``K`` kernels of ``table`` on
    ``spec`` (``layout``: ``nchw`` / ``nhwc``; ``half``: the precision's
    activations are 2-byte)."""
    n = len(table)
    t_c, t_m = roofline_ms(table, spec)
    cols: list[np.ndarray] = []
    for names_, key in ((CLASS_NAMES, "cls"), (PEAK_NAMES, "peak"), (PHASE_NAMES, "phase")):
        cols += [(table[key] == v).astype(np.float64) for v in names_]
    cls = table["cls"]
    conv = np.isin(cls, ("conv", "conv_grouped", "pool", "norm_bn"))
    nhwc = np.full(n, 1.0 if layout == "nhwc" else 0.0)
    cols += [nhwc, nhwc * conv, np.full(n, 1.0 if half else 0.0)]
    tc_us, tm_us = t_c * 1e3, t_m * 1e3
    cols += [np.log10(np.maximum(tc_us, 1e-3)), np.log10(np.maximum(tm_us, 1e-3)),
             np.clip(np.log2(np.maximum(tc_us, 1e-6) / np.maximum(tm_us, 1e-6)), -20, 20),
             np.log2(np.maximum(table["bytes"], 1.0) / (spec.l2_mb * 1e6))]
    m, nn, k, b = table["m"], table["n"], table["k"], table["batch"]
    gemm = (m > 0) & (nn > 0)
    tm_, tn_ = np.ceil(np.maximum(m, 1.0) / TILE), np.ceil(np.maximum(nn, 1.0) / TILE)
    tiles = np.maximum(b, 1.0) * tm_ * tn_
    waves = tiles / spec.sms
    wave_eff = np.where(gemm, waves / np.ceil(np.maximum(waves, 1e-9)), 0.0)
    tile_eff = np.where(gemm, np.maximum(m, 1.0) * np.maximum(nn, 1.0) / (tm_ * tn_ * TILE * TILE), 0.0)
    cols += [_log2(m), _log2(nn), _log2(k), _log2(b), np.where(gemm, np.log2(np.maximum(waves, 1e-3)), 0.0),
             wave_eff, tile_eff,
             np.where(gemm, (np.mod(k, 8) == 0).astype(np.float64), 0.0),
             np.where(gemm, (np.mod(nn, 8) == 0).astype(np.float64), 0.0),
             _log2(table["cols"]), _log2(table["rows"]),
             np.where(cls == "conv_grouped", _log2(k), 0.0),
             table["transcendental"], table["binary"]]
    return np.stack(cols, axis=1).astype(np.float32)
