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

#: 3: the L2 in the roofline's memory side; 4: the BatchNorm kernels restored
#: where the export says it folded one (:func:`perfseer_rt.graph.exporter.exporter_folds`).
FEATURE_VERSION = "gpu-kernel-4"
CLASS_NAMES = tuple(CLASSES)
#: Maths on tensor cores (one flag: the data has fp16 tensor-core kernels only,
#: and a one-hot per format would leave TF32 and bf16 untrained)
TENSOR_CORE = ("tf32", "fp16", "bf16")
PHASE_NAMES = ("forward", "backward", "loss", "optimizer")
#: Output tile side (elements) of the GEMM wave features (a common
#: tensor-core CTA tile).
TILE = 128
#: L2 bytes per clock per SM: the L2's bandwidth is this x SMs x boost clock
#: (no spec sheet states it; an assumption of the order NVIDIA's recent
#: parts reach).
L2_BYTES_PER_CLOCK_SM = 32.0
#: Share of the L2 a kernel's bytes find there (in eager mode a kernel reads
#: what the kernel before it has just written, and its own output stays in
#: L2 for the next one while it fits). 1 (the whole L2) had the lowest mean
#: held-out error of 0, 0.25, 0.5, 1 and 2 on the RTX 4090, RTX 3090 and
#: H100 held out in turn (reports/gpu-learned/ablation.md): chosen on those
#: held-out GPUs, so their figures are a little optimistic.
L2_SHARE = 1.0


def names() -> list[str]:
    """Feature names in column order."""
    return ([f"cls_{c}" for c in CLASS_NAMES] + ["tensor_core"]
            + [f"phase_{p}" for p in PHASE_NAMES]
            + ["nhwc", "nhwc_x_conv", "half_bytes", "log10_tc_us", "log10_tm_us", "log2_tc_over_tm",
               "log2_bytes_over_l2", "log2_m", "log2_n", "log2_k", "log2_batch", "log2_waves",
               "wave_eff", "tile_eff", "align8_k", "align8_n", "log2_cols", "log2_rows",
               "log2_per_group", "transcendental", "binary"])


def _log2(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.log2(np.maximum(x, 1.0)))


def memory_ms(nbytes: np.ndarray, spec: GpuSpec, share: float = L2_SHARE) -> np.ndarray:
    """ms to move ``nbytes`` (bytes read + written) per kernel: the part of
    them the L2 holds (``min(1, share x L2 / bytes)``) at the L2's
    bandwidth (:data:`L2_BYTES_PER_CLOCK_SM`), the rest at DRAM's
    (``share`` 0: DRAM only)."""
    nbytes = np.asarray(nbytes, dtype=np.float64)
    hit = np.minimum(1.0, share * spec.l2_mb * 1e6 / np.maximum(nbytes, 1.0))
    l2_bw = L2_BYTES_PER_CLOCK_SM * spec.sms * spec.clock_mhz * 1e6  # bytes/s
    return np.asarray(nbytes * ((1.0 - hit) / (spec.mem_bw_gbs * 1e9) + hit / l2_bw) * 1e3)


def roofline_ms(table: KernelTable, spec: GpuSpec) -> tuple[np.ndarray, np.ndarray]:
    """(compute ms at the kernel's peak, memory ms from L2 and DRAM,
    :func:`memory_ms`)."""
    peaks = peak_array(table, spec)
    flops = np.where(table["family"] == "memory", 0.0, table["flops"])
    return flops / (peaks * 1e9) * 1e3, memory_ms(table["bytes"], spec)


def features(table: KernelTable, spec: GpuSpec, layout: str, half: bool) -> np.ndarray:
    """``float32[K, len(names())]`` for the ``K`` kernels of ``table`` on
    ``spec`` (``layout``: ``nchw`` / ``nhwc``; ``half``: the precision's
    activations are 2-byte)."""
    n = len(table)
    t_c, t_m = roofline_ms(table, spec)
    cols: list[np.ndarray] = []
    cols += [(table["cls"] == v).astype(np.float64) for v in CLASS_NAMES]
    cols.append(np.isin(table["peak"], TENSOR_CORE).astype(np.float64))
    cols += [(table["phase"] == v).astype(np.float64) for v in PHASE_NAMES]
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
