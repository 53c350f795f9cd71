"""Kernel features: an operator's shape against a device's spec sheet.

The one source of truth for what the GPU prior's models see, used by
training (``training/gpuprior``) and the runtime alike. Every feature is
either a shape quantity or a shape quantity *relative to the device* (waves
of tiles over the SMs, time on the compute and memory roofs, arithmetic
intensity over the ridge point, working set over L2), so that a GPU with no
measured rows is described by its spec sheet alone. Raw device quantities
(SM count, clock) are deliberately not features: with four training GPUs
they act as device identities, and leave-one-GPU-out error grew with them
(linear on P4: 382 % MAPE with them, 29 % without, 800-1500 Adam steps).

The models predict ``log(latency / roofline bound)``; :func:`roofline_ms`
is that bound: ``max(FLOPs / fp32 peak, bytes / bandwidth)``.

Families and their shape keys (arrays, one value per kernel):

* ``bmm``, ``linear``, ``conv``: GEMM view ``batch, m, n, k`` (conv as an
  implicit GEMM: ``m = N*Ho*Wo``, ``n = C_out``, ``k = C_in*kh*kw``), plus
  ``flops`` and ``bytes``.
* ``elem``, ``ln``, ``softmax``: ``rows, cols`` (elements = rows*cols),
  ``flops``, ``bytes``; ``elem`` also ``binary`` (two tensor inputs) and
  ``transcendental`` (exp/tanh/erf/pow-like) flags.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfseer_rt.gpu.specs import GpuSpec

GEMM_FAMILIES = ("bmm", "linear", "conv")
ROW_FAMILIES = ("elem", "ln", "softmax")
FAMILIES = GEMM_FAMILIES + ROW_FAMILIES
#: Square output tiles (elements per side) whose waves are features.
TILES = (32, 64, 128)
#: Resident threads per SM assumed for the element-wise "thread waves".
THREADS_PER_SM = 2048

SPEC_KEYS = ("sms", "mem_bw_gbs", "fp32_gflops", "l2_mb", "clock_mhz")


def spec_arrays(specs: GpuSpec | list[GpuSpec], n: int) -> dict[str, np.ndarray]:
    """Spec fields as float arrays of length ``n`` (one spec for all rows,
    or one per row)."""
    if isinstance(specs, GpuSpec):
        return {k: np.full(n, float(getattr(specs, k))) for k in SPEC_KEYS}
    return {k: np.array([float(getattr(s, k)) for s in specs]) for k in SPEC_KEYS}


def roofline_ms(flops: np.ndarray, nbytes: np.ndarray, spec: dict[str, np.ndarray]) -> np.ndarray:
    """The roofline bound in ms: max(FLOPs / peak, bytes / bandwidth)."""
    t_c = flops / (spec["fp32_gflops"] * 1e9) * 1e3
    t_m = nbytes / (spec["mem_bw_gbs"] * 1e9) * 1e3
    return np.maximum(t_c, t_m)


def _l2(x: Any) -> np.ndarray:
    return np.asarray(np.log2(np.maximum(x, 1e-12)))


def feature_names(family: str) -> list[str]:
    common = ["log10_tc_us", "log10_tm_us", "log2_ai_over_ridge", "log2_bytes_over_l2"]
    if family in GEMM_FAMILIES:
        tiles = [f"{f}_{t}" for t in TILES for f in ("log2_waves", "wave_eff", "tile_eff")]
        return common + ["log2_batch", "log2_m", "log2_n", "log2_k"] + tiles
    extra = ["binary", "transcendental"] if family == "elem" else []
    return common + ["log2_elems", "log2_rows", "log2_cols", "log2_thread_waves"] + extra


def features(family: str, shape: dict[str, np.ndarray], spec: dict[str, np.ndarray]) -> np.ndarray:
    """``float32[n, len(feature_names(family))]`` for ``n`` kernels."""
    if family not in FAMILIES:
        raise ValueError(f"unknown kernel family {family!r}")
    flops = np.asarray(shape["flops"], np.float64)
    nbytes = np.asarray(shape["bytes"], np.float64)
    t_c = flops / (spec["fp32_gflops"] * 1e9) * 1e6
    t_m = nbytes / (spec["mem_bw_gbs"] * 1e9) * 1e6
    ai = flops / np.maximum(nbytes, 1.0)
    ridge = spec["fp32_gflops"] / spec["mem_bw_gbs"]
    cols = [np.log10(np.maximum(t_c, 1e-6)), np.log10(np.maximum(t_m, 1e-6)),
            _l2(np.maximum(ai, 1e-3) / ridge), _l2(nbytes / (spec["l2_mb"] * 1e6))]
    if family in GEMM_FAMILIES:
        b, m, n, k = (np.maximum(np.asarray(shape[x], np.float64), 1.0)
                      for x in ("batch", "m", "n", "k"))
        cols += [_l2(b), _l2(m), _l2(n), _l2(k)]
        for t in TILES:
            tm, tn = np.ceil(m / t), np.ceil(n / t)
            tiles = b * tm * tn
            waves = tiles / spec["sms"]
            cols += [_l2(waves), waves / np.ceil(waves), (m * n) / (tm * tn * t * t)]
    else:
        rows = np.maximum(np.asarray(shape["rows"], np.float64), 1.0)
        cc = np.maximum(np.asarray(shape["cols"], np.float64), 1.0)
        elems = rows * cc
        cols += [_l2(elems), _l2(rows), _l2(cc), _l2(elems / (spec["sms"] * THREADS_PER_SM))]
        if family == "elem":
            cols += [np.asarray(shape["binary"], np.float64),
                     np.asarray(shape["transcendental"], np.float64)]
    return np.stack(cols, axis=1).astype(np.float32)


# ---------------------------------------------------------------- shapes
def gemm_shape(batch: Any, m: Any, n: Any, k: Any, *, weight_batched: bool, bias: bool = False,
               itemsize: int = 4) -> dict[str, np.ndarray]:
    """A (batched) GEMM ``[batch, m, k] @ [(batch,) k, n]``: FLOPs and bytes."""
    b, m, n, k = (np.asarray(v, np.float64) for v in (batch, m, n, k))
    flops = 2 * b * m * n * k + (b * m * n if bias else 0)
    w = (b if weight_batched else 1.0) * k * n
    nbytes = itemsize * (b * m * k + w + b * m * n + (n if bias else 0))
    return {"batch": b, "m": m, "n": n, "k": k, "flops": flops, "bytes": nbytes}


def conv_shape(batch: Any, cin: Any, cout: Any, kernel: Any, size: Any, stride: Any, pad: Any,
               itemsize: int = 4) -> dict[str, np.ndarray]:
    """A square 2-D convolution (NeuSight's conv rows) in the GEMM view."""
    b, ci, co, kk, hw, s, p = (np.asarray(v, np.float64)
                               for v in (batch, cin, cout, kernel, size, stride, pad))
    out = np.floor((hw + 2 * p - kk) / s) + 1
    m, n, k = b * out * out, co, ci * kk * kk
    flops = 2 * m * n * k
    nbytes = itemsize * (b * ci * hw * hw + co * ci * kk * kk + b * co * out * out)
    return {"batch": np.ones_like(b), "m": m, "n": n, "k": k, "flops": flops, "bytes": nbytes}


def row_shape(family: str, rows: Any, cols: Any, *, binary: Any = 0, transcendental: Any = 0,
              itemsize: int = 4) -> dict[str, np.ndarray]:
    """Element-wise / LayerNorm / softmax over ``rows x cols``."""
    r, c = np.asarray(rows, np.float64), np.asarray(cols, np.float64)
    e = r * c
    binary = np.asarray(binary, np.float64) * np.ones_like(e)
    tensors = 2 + binary if family == "elem" else 2.0
    nbytes = itemsize * (tensors * e + (2 * c if family == "ln" else 0))
    per = {"elem": 1.0, "ln": 7.0, "softmax": 5.0}[family]
    return {"rows": r, "cols": c, "flops": per * e, "bytes": nbytes, "binary": binary,
            "transcendental": np.asarray(transcendental, np.float64) * np.ones_like(e)}
