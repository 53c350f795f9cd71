"""A training step's kernels beyond the forward pass: backward, loss and the
optimizer update, as PyTorch eager (autograd, ``torch.optim`` with its
default ``foreach`` implementations) launches them.

================  =================================================================
forward kernel    backward kernels
================  =================================================================
``linear``        dX = dY W^T (m, n=k, k=n) and dW = X^T dY (m=k, n, k=m), same math;
                  a bias adds a ``reduce`` over dY
``bmm``           dA and dB, two ``bmm`` of the transposed shapes
``attention``     the fused SDPA backward: 2.5x the forward's FLOPs (it recomputes the
                  scores), reading q, k, v, out, dout and writing dq, dk, dv (2x bytes)
``conv`` /        dgrad and wgrad, each priced as the forward kernel
``conv_grouped``
``norm_bn``       one kernel reading x and dy and writing dx (1.5x the forward's bytes);
                  the forward itself reads its input twice in training (statistics), 1.5x
``ln``            two ``ln`` kernels of the forward's shape (dx; dgamma/dbeta)
``softmax``       one ``softmax`` kernel of the forward's shape
``elem``          one element-wise kernel reading dY and X (binary, 1.5x a unary's bytes)
``pool``,         one kernel moving the forward's bytes
``reduce``,
``copy``, ``cast``
================  =================================================================

Loss: cross-entropy over the last axis of the largest output (log-softmax
and NLL forward, their backward: four ``softmax``-class kernels). Under
autocast every weight's half-precision gradient is cast back to fp32 (one
``cast`` per weight tensor). Optimizers (:data:`OPTIMIZERS`): the bytes
each ``foreach`` update reads and writes per fp32 parameter, in
multi-tensor launches of up to :data:`TENSORS_PER_LAUNCH` tensors.
Not counted: gradient zeroing (``set_to_none``), a GradScaler, data loading,
dropout (an eval-mode export has none).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu.kernel_table import Builder, KernelTable
from perfseer_rt.gpu.precision import Precision
from perfseer_rt.graph.perfgraph import PerfGraph

#: Tensors a ``foreach`` multi-tensor-apply launch handles (PyTorch's depth-1
#: list size, ``MultiTensorApply.cuh``: 110 tensors or 320 blocks).
TENSORS_PER_LAUNCH = 110


@dataclass(frozen=True)
class Optimizer:
    """An optimizer's update as ``foreach`` kernels: ``ops`` foreach calls,
    ``bytes_per_param`` bytes read + written per fp32 parameter in all,
    ``state_per_param`` bytes of state kept per parameter."""

    name: str
    ops: int
    bytes_per_param: float
    state_per_param: float
    meaning: str


OPTIMIZERS: dict[str, Optimizer] = {o.name: o for o in (
    Optimizer("sgd", 1, 12.0, 0.0, "SGD without momentum: p -= lr g (reads p, g; writes p)"),
    Optimizer("sgd-momentum", 3, 32.0, 4.0,
              "SGD with momentum (foreach): buf *= m; buf += g; p -= lr buf"),
    Optimizer("adam", 9, 76.0, 8.0,
              "Adam (foreach): exp_avg lerp, exp_avg_sq mul+addcmul, sqrt, bias corrections, "
              "addcdiv into p; two fp32 moments"),
    Optimizer("adamw", 10, 84.0, 8.0, "AdamW (foreach): Adam plus the decoupled weight decay p *= 1 - lr wd"),
    Optimizer("adadelta", 8, 72.0, 8.0,
              "Adadelta (foreach): square_avg and acc_delta updates, sqrt, div, p += delta"),
)}
DEFAULT_OPTIMIZER = "adamw"


def get_optimizer(name: str | None) -> Optimizer:
    """The :class:`Optimizer` called ``name`` (default AdamW).

    Raises:
        PerfSeerError: an unknown name (the message lists the known ones).
    """
    key = name or DEFAULT_OPTIMIZER
    if key not in OPTIMIZERS:
        raise PerfSeerError(f"optimizer {name!r}: expected one of {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[key]


def training_forward(fwd: KernelTable) -> KernelTable:
    """The forward kernels as they run in training: BatchNorm computes batch
    statistics (reads its input twice)."""
    out = KernelTable({k: v.copy() for k, v in fwd.cols.items()}, list(fwd.notes))
    bn = out["cls"] == "norm_bn"
    out.cols["bytes"][bn] *= 1.5
    return out


def backward(fwd: KernelTable) -> KernelTable:
    """The backward kernels of the forward table ``fwd`` (module table), in
    reverse order."""
    b = Builder("backward")
    c = fwd.cols
    for j in range(len(fwd) - 1, -1, -1):
        cls, node = str(c["cls"][j]), int(c["node"][j])
        fl, by, peak = float(c["flops"][j]), float(c["bytes"][j]), str(c["peak"][j])
        bat, m, n, k = (float(c[x][j]) for x in ("batch", "m", "n", "k"))
        rows, cols = float(c["rows"][j]), float(c["cols"][j])
        if cls in ("linear", "bmm"):
            isz = by / max(bat * (m * k + k * n + m * n), 1.0)
            b.add(cls, node, fl, isz * bat * (m * n + n * k + m * k), peak, batch=bat, m=m, n=k, k=n)
            b.add(cls, node, fl, isz * bat * (m * k + m * n + k * n), peak, host_ops=0.5,
                  batch=bat, m=k, n=n, k=m)
        elif cls == "attention":
            b.add(cls, node, 2.5 * fl, 2.0 * by, peak, launches=float(c["launches"][j]),
                  host_ops=float(c["host_ops"][j]), batch=bat, m=m, n=n, k=k)
        elif cls in ("conv", "conv_grouped"):
            for half in (1.0, 0.5):
                b.add(cls, node, fl, by, peak, host_ops=half, batch=bat, m=m, n=n, k=k)
        elif cls == "norm_bn":
            b.add(cls, node, fl, 1.5 * by, rows=rows, cols=cols)
        elif cls == "ln":
            for _ in range(2):
                b.add(cls, node, fl, by, rows=rows, cols=cols)
        elif cls == "elem":
            unary = float(c["binary"][j]) < 0.5
            b.add(cls, node, fl, by * (1.5 if unary else 1.0), rows=rows, cols=cols, binary=1.0,
                  transcendental=float(c["transcendental"][j]))
        else:
            b.add(cls, node, fl, by, rows=rows, cols=cols)
    return b.table()


def loss(graph: PerfGraph, prec: Precision) -> KernelTable:
    """Cross-entropy over the last axis of the largest output (module doc);
    an empty table for a graph without one."""
    b = Builder("loss")
    fed = np.zeros(graph.num_nodes, bool)
    if graph.num_edges:
        fed[graph.edge_index[0]] = True
    outputs = np.flatnonzero(~fed)
    if len(outputs):
        elems = graph.node_column("out_elems")
        i = int(outputs[np.argmax(elems[outputs])])
        cols = float(graph.node_column("out_channels")[i]) or 1.0
        rows = max(float(elems[i]) / cols, 1.0)
        for _ in range(4):  # log_softmax, nll (fp32 under autocast); their backward
            b.add("softmax", i, 5.0 * rows * cols, 2.0 * 4.0 * rows * cols, rows=rows, cols=cols)
    return b.table()


def weight_tensors(graph: PerfGraph) -> tuple[float, int]:
    """(parameters, weight tensors) of the graph's trainable weights: nodes
    that read constants of more than one element."""
    params = graph.node_column("params")
    big = params > 1.0
    return float(graph.globals["params_total"]), int(big.sum())


def optimizer(graph: PerfGraph, opt: Optimizer, prec: Precision) -> KernelTable:
    """The optimizer update of every parameter (fp32 master weights under
    autocast; half weights and state in a half model), plus autocast's
    gradient casts."""
    params, tensors = weight_tensors(graph)
    b = Builder("optimizer")
    if prec.autocast and tensors:
        b.add("cast", -1, params, 6.0 * params, rows=1.0, cols=max(params, 1.0),
              launches=float(tensors), host_ops=float(tensors))
    scale = prec.weight_bytes / 4.0
    launches = float(opt.ops * max(1, math.ceil(tensors / TENSORS_PER_LAUNCH)))
    b.add("optimizer", -1, 2.0 * opt.ops * params, opt.bytes_per_param * params * scale,
          launches=launches, host_ops=float(opt.ops))
    return b.table()
