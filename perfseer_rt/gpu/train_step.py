"""One training step on a GPU from the kernel prior (``predict --mode train``
on a ``gpu-prior`` device): forward, loss, backward and optimizer update.

The prior prices forward kernels only (NeuSight's rows). A training step is
the forward kernels (:func:`perfseer_rt.gpu.kernels.map_graph`), the loss,
and for each forward kernel the backward kernels autograd launches for it,
each priced by the same prior at its own shape:

================  ==============================================================
forward kernel    backward kernels
================  ==============================================================
``linear``        dX = dY W^T: linear (m, n=k, k=n); dW = X^T dY: linear (m=k, n, k=m)
``bmm``           dA: bmm (b, m, n=k, k=n); dB: bmm (b, m=k, n, k=m)
``conv``          dgrad and wgrad, each priced as the forward kernel (same FLOPs)
``ln``            two ``ln`` kernels of the forward's shape (dX; dgamma/dbeta)
``softmax``       one ``softmax`` kernel of the forward's shape
``elem``          one binary ``elem`` kernel of the forward's shape (reads dY and X)
``memory``        one ``memory`` kernel moving the forward's bytes
================  ==============================================================

Loss: cross-entropy over the last axis of the model's largest output (a
softmax forward and one backward). Optimizer: AdamW, fused over all
parameters (``torch.optim.AdamW(foreach=True)``, the CUDA default): it reads
parameters, gradients and both moments and writes parameters and moments,
28 bytes per fp32 parameter, priced as ``memory`` kernels. Not counted:
dropout (the exported graph is the eval-mode one), gradient zeroing
(``set_to_none``), data loading, host-side Python between kernels.

Peak memory (MiB, an estimate stated as such): weights, gradients (the same
bytes), AdamW's two fp32 moments, activations kept for backward (every
forward kernel's output, at the model's element size), the largest
activation once more (its gradient in flight), the cuBLAS workspace and the
CUDA context from the entry's ``memory_overhead``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfseer_rt.gpu.kernels import Kernels
from perfseer_rt.graph import PerfGraph

MIB = float(2**20)
#: AdamW state per parameter: two fp32 moments (bytes); the update reads
#: and writes both, reads the gradient and reads and writes the parameter
#: (28 bytes per fp32 parameter in all).
ADAMW_STATE_BYTES = 8.0
OPTIMIZER = "AdamW (fused foreach, fp32 state)"
STEP_MEANING = ("one training step, one stream: forward kernels + cross-entropy loss + the "
                "backward kernels autograd launches for each forward kernel + one AdamW update, "
                "each kernel priced by the prior plus the launch overhead (perfseer_rt/gpu/"
                "train_step.py states the rules); dropout, gradient zeroing and host-side time "
                "are not counted")
MEM_MEANING = ("estimated peak GPU memory of one training step: weights + gradients + AdamW "
               "moments (exact from the initializers) + activations kept for backward (every "
               "forward kernel's output) + the largest activation's gradient + workspace + CUDA "
               "context (assumed figures, not measured by us)")


def _gemm(m: np.ndarray, n: np.ndarray, k: np.ndarray, b: np.ndarray, itemsize: float
          ) -> dict[str, np.ndarray]:
    """Shape arrays of GEMMs ``b x [m, k] @ [k, n]`` (FLOPs, bytes moved)."""
    return {"batch": b, "m": m, "n": n, "k": k, "flops": 2.0 * b * m * n * k,
            "bytes": itemsize * b * (m * k + k * n + m * n)}


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}


def backward(fwd: Kernels, itemsize: float) -> Kernels:
    """The backward kernels of ``fwd`` (module table); ``itemsize``: bytes
    per element of the model's tensors (4 for fp32)."""
    out = Kernels()
    for fam, s in fwd.shapes.items():
        nodes = fwd.nodes[fam]
        if fam in ("linear", "bmm"):
            m, n, k, b = s["m"], s["n"], s["k"], s["batch"]
            out.shapes[fam] = _concat([_gemm(m, k, n, b, itemsize), _gemm(k, n, m, b, itemsize)])
            out.nodes[fam] = np.concatenate([nodes, nodes])
        elif fam in ("conv", "ln"):
            out.shapes[fam] = _concat([s, s])
            out.nodes[fam] = np.concatenate([nodes, nodes])
        elif fam == "elem":
            unary = s["binary"] < 0.5
            out.shapes[fam] = {**s, "binary": np.ones_like(s["binary"]),
                               "bytes": np.where(unary, s["bytes"] * 1.5, s["bytes"])}
            out.nodes[fam] = nodes
        else:  # softmax, memory: one kernel of the forward's shape
            out.shapes[fam] = dict(s)
            out.nodes[fam] = nodes
    return out


def loss(graph: PerfGraph, itemsize: float) -> Kernels:
    """Cross-entropy over the last axis of the largest output: a softmax
    forward and backward (two ``softmax`` kernels; none for a graph without
    an output of known shape)."""
    out = Kernels()
    fed = np.zeros(graph.num_nodes, bool)
    if graph.num_edges:
        fed[graph.edge_index[0]] = True
    outputs = np.flatnonzero(~fed)
    if not len(outputs):
        return out
    elems = graph.node_column("out_elems")
    i = int(outputs[np.argmax(elems[outputs])])
    cols = float(graph.node_column("out_channels")[i]) or 1.0
    rows = max(float(elems[i]) / cols, 1.0)
    shape = {"rows": np.full(2, rows), "cols": np.full(2, cols),
             "flops": np.full(2, 5.0 * rows * cols), "bytes": np.full(2, 2.0 * itemsize * rows * cols),
             "binary": np.zeros(2), "transcendental": np.zeros(2)}
    out.shapes["softmax"] = shape
    out.nodes["softmax"] = np.array([i, i], np.int64)
    return out


def optimizer(weight_bytes: float, params: float) -> Kernels:
    """AdamW's update of ``params`` parameters stored in ``weight_bytes``
    (gradients in the same dtype, fp32 moments): one ``memory`` kernel (the
    fused multi-tensor apply)."""
    out = Kernels()
    out.shapes["memory"] = {"flops": np.array([10.0 * params]),
                            "bytes": np.array([3.0 * weight_bytes + 2.0 * ADAMW_STATE_BYTES * params])}
    out.nodes["memory"] = np.array([-1], np.int64)
    return out


def saved_activation_bytes(fwd: Kernels, graph: PerfGraph, itemsize: float) -> tuple[float, float]:
    """(bytes of every forward kernel's output, bytes of the largest one)."""
    ids = np.concatenate([v for v in fwd.nodes.values()]) if fwd.nodes else np.zeros(0, np.int64)
    if not len(ids):
        return 0.0, 0.0
    sizes = graph.node_column("out_elems")[ids] * itemsize
    return float(sizes.sum()), float(sizes.max())


def memory_parts(weights: float, params: float, saved: float, largest: float, workspace: float,
                 context_mib: float) -> dict[str, Any]:
    """Peak training memory's parts in MiB (``weights``, ``saved``,
    ``largest``, ``workspace`` in bytes; ``params`` a count)."""
    parts = {"weights": weights / MIB, "gradients": weights / MIB,
             "optimizer_state": params * ADAMW_STATE_BYTES / MIB,
             "activations": saved / MIB, "activation_gradient": largest / MIB,
             "workspace": workspace / MIB, "cuda_context": context_mib}
    return {k: round(v, 2) for k, v in parts.items()}
