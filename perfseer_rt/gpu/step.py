"""One step's kernels and time on a GPU: forward (inference) or forward +
loss + backward + optimizer (training), as PyTorch eager runs them.

Time: the GPU runs the kernels one after another (one stream); the host
dispatches each framework op before its kernel can start. When the host is
faster, the GPU's busy time is the step; when it is slower (small batches,
many small ops), the host is. The step is the smooth maximum of the two
sums, ``(G^p + H^p)^(1/p)`` with :data:`SMOOTH_P`, which stays within
``2^(1/p)`` of the larger where they are equal and meets it where one
dominates (a one-stream pipeline lies between ``max(G, H)`` and ``G + H``).

Layout transposes (off by default, ``StepConfig.nchw_transposes``; an
ablation of the learned layer until its cross-validation decides): cuDNN's
tensor-core convolutions run in NHWC, and NVIDIA's performance guides state
that an NCHW tensor is transposed to NHWC and back around each one. With the
flag, every dense half-precision convolution kernel of an NCHW step (forward,
dgrad, wgrad) gets a ``copy`` kernel reading and writing the activations it
moves (its bytes less its fp16 weight, twice: two launches, no framework op).

Host time per op (:data:`HOST_MS`): library calls (cuDNN/cuBLAS:
convolutions, GEMMs, attention) and other ops, per phase; assumptions for a
recent desktop/server CPU (PyTorch's per-op dispatch is a few microseconds,
a cuDNN call tens), scaled by the learned layer's fitted factor where there
is one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfseer_rt.gpu import backward as B
from perfseer_rt.gpu import eager
from perfseer_rt.gpu.kernel_table import Builder, KernelTable
from perfseer_rt.gpu.precision import Precision
from perfseer_rt.graph.perfgraph import PerfGraph

SMOOTH_P = 4.0
LIBRARY_CLASSES = ("conv", "conv_grouped", "linear", "bmm", "attention")
#: Host ms per framework op: (library call, other op), by phase.
HOST_MS = {"inference": (0.020, 0.008), "forward": (0.025, 0.012), "backward": (0.015, 0.008),
           "loss": (0.010, 0.010), "optimizer": (0.030, 0.030)}


@dataclass(frozen=True)
class StepConfig:
    """What is asked: precision, mode, optimizer, fused attention, BatchNorm
    restoration (see :mod:`perfseer_rt.gpu.eager`)."""

    precision: Precision
    mode: str = "inference"            #: "inference" or "train"
    optimizer: B.Optimizer | None = None
    sdpa: bool = True
    fold_bn: bool = True
    layout: str = "nchw"               #: "nchw" or "nhwc" (channels-last)
    #: a training step ends with the optimizer update (False: forward, loss
    #: and backward only, as some published training timings are)
    update: bool = True
    #: price cuDNN's NCHW <-> NHWC transposes around half-precision
    #: convolutions in an NCHW step (module doc; off by default)
    nchw_transposes: bool = False


def kernels(graph: PerfGraph, cfg: StepConfig) -> KernelTable:
    """Every kernel of one step (inference: the forward; train: forward,
    loss, backward, optimizer)."""
    fwd = eager.forward(graph, cfg.precision, sdpa=cfg.sdpa, fold_bn=cfg.fold_bn)
    if cfg.mode != "train":
        table = fwd
    else:
        opt = cfg.optimizer or B.get_optimizer(None)
        parts = [B.training_forward(fwd), B.loss(graph, cfg.precision), B.backward(fwd)]
        if cfg.update:
            parts.append(B.optimizer(graph, opt, cfg.precision))
        table = KernelTable.concat(parts)
    if cfg.nchw_transposes and cfg.layout == "nchw":
        table = KernelTable.concat([table, layout_transposes(table)])
    return table


#: Precisions whose dense convolutions cuDNN runs on tensor cores in NHWC.
NHWC_ONLY_PEAKS = ("fp16", "bf16")


def layout_transposes(table: KernelTable) -> KernelTable:
    """The NCHW <-> NHWC copies around ``table``'s dense half-precision
    convolutions (module doc), one ``copy`` row per convolution kernel, in
    its phase: bytes = 2 x (its bytes - its fp16 weight ``n x k x 2``)."""
    sel = np.flatnonzero((table["cls"] == "conv") & np.isin(table["peak"], NHWC_ONLY_PEAKS))
    builders: dict[str, Builder] = {}
    for i in sel:
        moved = max(float(table["bytes"][i]) - 2.0 * float(table["n"][i] * table["k"][i]), 0.0)
        phase = str(table["phase"][i])
        b = builders.setdefault(phase, Builder(phase))
        b.add("copy", int(table["node"][i]), 0.0, 2.0 * moved, launches=2.0, host_ops=0.0,
              rows=float(table["m"][i]), cols=float(table["n"][i]))
    return KernelTable.concat([b.table() for b in builders.values()])


def host_ms(table: KernelTable, mode: str, scale: float = 1.0) -> np.ndarray:
    """Host ms before each kernel (:data:`HOST_MS` x its ``host_ops``)."""
    out = np.zeros(len(table))
    lib = np.isin(table["cls"], LIBRARY_CLASSES)
    for phase in ("forward", "backward", "loss", "optimizer"):
        sel = table["phase"] == phase
        key = "inference" if phase == "forward" and mode != "train" else phase
        call, other = HOST_MS[key]
        out[sel] = np.where(lib[sel], call, other) * table["host_ops"][sel]
    return out * scale


def total_ms(gpu_ms: float, host_total_ms: float) -> float:
    """The step from the GPU's busy time and the host's (module doc)."""
    return float((gpu_ms ** SMOOTH_P + host_total_ms ** SMOOTH_P) ** (1.0 / SMOOTH_P))
