"""Peak GPU memory, as an estimate in named parts (MiB).

Two interfaces live here. :func:`predict_memory` (inference and training
steps as PyTorch eager allocates them: the rules in
:mod:`perfseer_rt.gpu.mem_schedule`, the caching allocator in
:mod:`perfseer_rt.gpu.allocator`, the context in
:mod:`perfseer_rt.gpu.cuda_context`) is the one to call. :func:`estimate`,
the older inference estimate with onnxruntime's arena, is kept for the
callers that still use it; its parts:

* ``weights``: exact: every initializer once (shared ones counted once),
  from their dims, so structure-only models work.
* ``activations``: the largest live set of the graph's schedule: nodes run
  in the ONNX (topological) order; a node's outputs live from that node
  until their last consumer (to the end when nothing consumes them: graph
  outputs); graph inputs live throughout.
* ``allocator``: onnxruntime's BFC arena grows by doubling
  (``kNextPowerOfTwo``, its default), so the activations' arena is taken as
  their peak rounded up to the next power of two MiB; the part is that
  rounding.
* ``workspace``: cuBLAS workspace plus, with convolutions, the largest
  implicit-GEMM (im2col) buffer of any Conv node as cuDNN's workspace.
* ``cuda_context``: CUDA context plus loaded cuBLAS/cuDNN kernels, a per
  device figure in the device manifest (an assumption, not measured by us).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu import allocator, cuda_context, mem_graph, mem_schedule
from perfseer_rt.gpu.optimizers import optimizer_rule
from perfseer_rt.gpu.precision import get_precision as precision_of
from perfseer_rt.graph.ops import dtype_itemsize
from perfseer_rt.graph.perfgraph import PerfGraph

MIB = 1024.0 ** 2


def weight_bytes(proto: onnx.ModelProto | None, graph: PerfGraph) -> tuple[float, bool]:
    """Bytes of the weights, and whether the figure is exact (from the model's
    initializers) or an upper bound (from the PerfGraph, shared weights
    counted per use)."""
    if proto is None:
        return float(graph.node_column("weight").sum()), False
    seen: set[str] = set()
    total = 0
    graphs = [proto.graph]  # and every subgraph: onnxruntime loads the weights of both
    while graphs:           # branches of an If, of Loop bodies, ...
        g = graphs.pop()
        for t in list(g.initializer) + [s.values for s in g.sparse_initializer]:
            if t.name in seen:
                continue
            seen.add(t.name)
            total += math.prod(t.dims) * dtype_itemsize(t.data_type)
        for node in g.node:
            for a in node.attribute:
                if node.op_type == "Constant" and a.name == "value" and a.t is not None:
                    total += math.prod(a.t.dims) * dtype_itemsize(a.t.data_type)  # weights too
                graphs += [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
    return float(total), True


def peak_activation_bytes(graph: PerfGraph, itemsize_scale: float = 1.0) -> float:
    """Largest live set (bytes) over the ONNX node order (see module doc)."""
    n = graph.num_nodes
    out_elems = graph.node_column("out_elems")
    itemsize = np.full(n, 4.0)
    last_use = np.full(n, n, dtype=np.int64)
    if graph.num_edges:
        src, dst = graph.edge_index
        dtype_b = graph.edge_column("dtype_bytes")
        itemsize[src] = dtype_b
        last = np.full(n, -1, dtype=np.int64)
        np.maximum.at(last, src, dst)
        last_use = np.where(last >= 0, last, n)
    size = out_elems * itemsize * itemsize_scale
    inputs = sum(math.prod(s) for s in graph.input_shapes.values()) * 4.0 * itemsize_scale
    # live(k) = sum of size[j] for j <= k <= last_use[j]: a difference array.
    delta = np.zeros(n + 2)
    np.add.at(delta, np.arange(n), size)
    np.add.at(delta, np.minimum(last_use, n) + 1, -size)
    live = np.cumsum(delta)[:n]
    return float(live.max() if n else 0.0) + float(inputs)


def workspace_bytes(graph: PerfGraph, cublas_mib: float) -> float:
    conv = np.array([op == "Conv" for op in graph.node_ops])
    im2col = 0.0
    if conv.any():
        c = graph.node_column
        per = (c("in_channels") * np.maximum(c("kernel_h"), 1) * np.maximum(c("kernel_w"), 1)
               * c("out_elems") / np.maximum(c("out_channels"), 1) * 4.0)
        im2col = float(per[conv].max())
    return cublas_mib * MIB + im2col


def estimate(graph: PerfGraph, proto: onnx.ModelProto | None, overhead: dict[str, Any],
             itemsize_scale: float = 1.0) -> tuple[float, dict[str, float], bool]:
    """Total MiB, its parts in MiB, and whether the weights are exact.

    ``overhead``: the device manifest's ``memory_overhead`` block
    (``cuda_context_mib``, ``cublas_workspace_mib``).
    """
    w, exact = weight_bytes(proto, graph)
    act = peak_activation_bytes(graph, itemsize_scale)
    act_mib = act / MIB
    arena = 2.0 ** math.ceil(math.log2(act_mib)) if act_mib > 1.0 else 1.0
    parts = {"weights": w * itemsize_scale / MIB, "activations": act_mib,
             "allocator": arena - act_mib,
             "workspace": workspace_bytes(graph, overhead["cublas_workspace_mib"]) / MIB,
             "cuda_context": float(overhead["cuda_context_mib"])}
    parts = {k: round(v, 2) for k, v in parts.items()}
    return round(sum(parts.values()), 2), parts, exact


# ---------------------------------------------------------------------------
# Memory as PyTorch allocates it (inference and training), the new interface.
# ---------------------------------------------------------------------------

#: What each view of the peak is (the ``meaning`` texts of the output).
VIEW_MEANING = {
    "torch_allocated": "torch.cuda.max_memory_allocated(): the largest sum of the caching "
                       "allocator's live blocks (tensors rounded up to 512 B, whole unsplit blocks, "
                       "cuBLAS workspaces included)",
    "torch_reserved": "torch.cuda.max_memory_reserved(): the segments the caching allocator took "
                      "from the driver (2 MiB / 20 MiB / 2 MiB-rounded) and keeps cached",
    "nvml": "what nvidia-smi / NVML show for the process: reserved segments plus the CUDA context "
            "(an estimate, see cuda_context)",
}
PART_ORDER = ("weights", "buffers", "weight_casts", "gradients", "optimizer_state", "optimizer_temporaries",
              "activations", "activation_gradients", "loss", "batch", "workspace", "allocator_rounding",
              "allocator_cache", "cuda_context")


@dataclass
class MemoryEstimate:
    """Peak GPU memory of one run, in MiB.

    ``parts`` add up to ``views["nvml"]``: the tensors live at the moment
    ``max_memory_allocated`` is reached, by kind; the allocator's rounding
    at that moment; the cached segments beyond it (``allocator_cache``:
    fragmentation and blocks freed earlier); the CUDA context.
    """

    mode: str
    precision: str
    optimizer: str | None
    parts: dict[str, float]
    views: dict[str, float]
    tensor_peak_mib: float          #: largest sum of live tensor bytes (no rounding, no workspace)
    context: dict[str, float]
    assumptions: list[str]
    fits: bool = True               #: within ``capacity_mib`` (a MIG slice), when one was given
    oom_at: str | None = None

    @property
    def peak_mib(self) -> float:
        return self.views["nvml"]

    def metric(self) -> dict[str, Any]:
        """The ``peak_mem_mb`` JSON block."""
        what = ("one training step (forward, cross-entropy loss, backward, "
                f"{self.optimizer} step, zero_grad)" if self.mode == "train" else "one inference")
        return {"value": round(self.views["nvml"], 2), "unit": "MiB",
                "meaning": f"peak GPU memory of {what} under PyTorch eager ({self.precision}), as "
                           "nvidia-smi / NVML would show it for the process; the views give what "
                           "torch.cuda.max_memory_allocated / max_memory_reserved would report",
                "parts": {k: round(v, 2) for k, v in self.parts.items()},
                "views": {k: {"value": round(v, 2), "unit": "MiB", "meaning": VIEW_MEANING[k]}
                          for k, v in self.views.items()},
                "tensor_peak_mib": round(self.tensor_peak_mib, 2),
                "context_parts_mib": self.context, "fits": self.fits,
                "assumptions": list(self.assumptions)}


def gpu_facts(spec: Any) -> tuple[int, str, str]:
    """(SMs, architecture key, name) of a spec sheet object (the prior's
    :class:`~perfseer_rt.gpu.specs.GpuSpec` or a spec-sheet record with
    ``architecture`` / ``compute_capability`` fields)."""
    name = str(getattr(spec, "name", "") or "")
    cc = getattr(spec, "compute_capability", None)
    arch = getattr(spec, "architecture", None)
    key = cuda_context.architecture(str(cc) if cc else None, name)
    if arch and not cc:
        key = {"ampere": "ampere", "blackwell": "blackwell"}.get(str(arch).lower(), str(arch).lower())
        if key not in cuda_context.MAX_THREADS_PER_SM:
            key = cuda_context.architecture(None, name)
    return int(getattr(spec, "sms", 0) or 0), key, name


def tied_transpose_bytes(proto: onnx.ModelProto | None) -> float:
    """Bytes of 2-D initializers that are the transpose of another one (an
    exporter's constant-folded ``weight.t()`` of a tied weight: GPT-2's LM
    head is its token embedding). With the values present they are compared;
    a structure-only model (no values) counts a pair whose one member a Gather
    reads (an embedding table) and the other a MatMul (the head)."""
    if proto is None:
        return 0.0
    mats = {t.name: t for t in proto.graph.initializer if len(t.dims) == 2 and math.prod(t.dims) >= 4096}
    by_shape: dict[tuple[int, int], list[onnx.TensorProto]] = {}
    for t in mats.values():
        by_shape.setdefault((int(t.dims[0]), int(t.dims[1])), []).append(t)
    gathered = {n.input[0] for n in proto.graph.node if n.op_type == "Gather" and n.input}
    multiplied = {i for n in proto.graph.node if n.op_type in ("MatMul", "Gemm") for i in n.input[1:2]}
    dup = 0.0
    seen: set[str] = set()
    for (r, c), ts in by_shape.items():
        if r == c:
            continue
        for a in ts:
            for b in by_shape.get((c, r), []):
                if a.name in seen or b.name in seen:
                    continue
                has = a.HasField("raw_data") or len(a.float_data)
                if has and (b.HasField("raw_data") or len(b.float_data)):
                    va, vb = numpy_helper.to_array(a), numpy_helper.to_array(b)
                    same = va.shape == vb.T.shape and np.array_equal(va.T, vb)
                else:
                    same = a.name in gathered and b.name in multiplied
                if same:
                    seen.update((a.name, b.name))
                    dup += math.prod(b.dims) * dtype_itemsize(b.data_type)
    return dup


def _input_itemsizes(proto: onnx.ModelProto | None) -> dict[str, float]:
    if proto is None:
        return {}
    out = {}
    for vi in proto.graph.input:
        try:
            out[vi.name] = float(dtype_itemsize(vi.type.tensor_type.elem_type))
        except Exception:  # noqa: BLE001 (an odd type: keep the 4-byte default)
            continue
    return out


def predict_memory(graph: PerfGraph, proto: onnx.ModelProto | None, spec: Any, *, mode: str = "inference",
                   precision: str | None = "fp32", optimizer: str | None = "adamw",
                   weight_decay: bool = False, folded_bn: bool = True, fused_attention: bool = True,
                   lazy_loading: bool = True, capacity_mib: float | None = None, policy: str = "cuda",
                   coeffs: cuda_context.ContextCoeffs = cuda_context.CONTEXT_COEFFS,
                   steps: int = 2, workspaces: bool = True) -> MemoryEstimate:
    """Peak memory of an inference or a training step under PyTorch eager
    on the GPU ``spec`` (module :mod:`perfseer_rt.gpu.mem_schedule` states
    the rules).

    Args:
        mode: ``"inference"`` or ``"train"``.
        precision: fp32, tf32, amp-fp16, amp-bf16, bf16, fp16.
        optimizer: sgd, sgd-momentum, adam, adamw, adadelta, rmsprop, adagrad (training).
        capacity_mib: memory available (a MIG slice): ``fits`` says whether
            the run holds in it (the allocator releases cached segments
            before it gives up, as PyTorch does).
        policy: autocast lists, ``"cuda"``; ``"cpu"`` only to compare with
            the CPU traces of ``training/memtrace``.
        workspaces: False leaves the cuBLAS workspaces out (to compare with
            those traces, which do not see them).

    Raises:
        PerfSeerError: an unknown mode, precision or optimizer.
    """
    if mode not in ("inference", "train"):
        raise PerfSeerError(f"mode {mode!r}: expected inference or train")
    prec = precision_of(precision)
    opt = optimizer_rule(optimizer or "adamw") if mode == "train" else None
    sms, arch, _ = gpu_facts(spec)
    mg = mem_graph.build(graph, folded_bn=folded_bn, fused_attention=fused_attention,
                         input_itemsize=_input_itemsizes(proto))
    exact, is_exact = weight_bytes(proto, graph)
    tied = tied_transpose_bytes(proto)
    exact -= tied
    per_use = sum(u.weight_bytes for u in mg.units)
    scale = exact / per_use if is_exact and per_use > exact > 0 else 1.0
    opts = mem_schedule.Options(precision=prec, training=mode == "train", optimizer=opt,
                                weight_decay=weight_decay, policy=policy,
                                cublas_bytes=cuda_context.cublas_workspace_bytes(arch) if workspaces else 0,
                                cublaslt_bytes=cuda_context.CUBLASLT_WORKSPACE_BYTES if workspaces else 0,
                                steps=steps)
    sched = mem_schedule.Schedule(mg, opts, param_scale=scale)
    events = sched.run()
    cap = capacity_mib * MIB if capacity_mib is not None else None
    fits, oom = True, None
    alloc = allocator.replay((e.kind, e.key, e.nbytes) for e in events)
    _, by_cat, _ = _peak_composition(events)
    ctx = cuda_context.context_mib(sms or 1, arch, uses_blas=sched.handles > 0,
                                   uses_cudnn=any(u.op in ("Conv", "ConvTranspose") for u in mg.units),
                                   lazy_loading=lazy_loading, coeffs=coeffs)
    context = float(sum(ctx.values()))
    if cap is not None:
        try:
            allocator.replay(((e.kind, e.key, e.nbytes) for e in events), capacity_bytes=cap - context * MIB)
        except allocator.OutOfMemory as exc:
            fits, oom = False, str(exc)
    parts = {k: by_cat.get(k, 0.0) / MIB for k in mem_schedule.CATEGORIES}
    parts["allocator_rounding"] = (alloc.peak_allocated - sum(by_cat.values())) / MIB
    parts["allocator_cache"] = (alloc.peak_reserved - alloc.peak_allocated) / MIB
    parts["cuda_context"] = context
    parts = {k: parts[k] for k in PART_ORDER if k in parts}
    views = {"nvml": alloc.peak_reserved / MIB + context, "torch_allocated": alloc.peak_allocated / MIB,
             "torch_reserved": alloc.peak_reserved / MIB}
    tensor_peak = _tensor_peak(events) / MIB
    assumptions = _assumptions(mg, prec.name, opts, arch, lazy_loading, coeffs, fused_attention)
    if tied:
        assumptions.append(f"{tied / MIB:.1f} MiB of initializers are transposed copies of others (the "
                           "exporter folds a tied weight's transpose, e.g. an LM head tied to the embedding): "
                           "trained as one parameter")
    return MemoryEstimate(mode, prec.name, optimizer if mode == "train" else None, parts, views,
                          tensor_peak, ctx, assumptions, fits, oom)


def _peak_composition(events: list[Any]) -> tuple[int, dict[str, float], float]:
    """(index of the rounded-live-bytes peak, raw bytes per category live
    there, rounded bytes there)."""
    live: dict[int, tuple[int, str]] = {}
    cur = 0
    best, best_i = -1, 0
    for i, e in enumerate(events):
        r = allocator.round_size(e.nbytes)
        if e.kind == "+":
            live[e.key] = (e.nbytes, e.category)
            cur += r
            if cur > best:
                best, best_i = cur, i
        else:
            live.pop(e.key, None)
            cur -= r
    live2: dict[int, tuple[int, str]] = {}
    for e in events[: best_i + 1]:
        if e.kind == "+":
            live2[e.key] = (e.nbytes, e.category)
        else:
            live2.pop(e.key, None)
    by: dict[str, float] = {}
    for n, c in live2.values():
        by[c] = by.get(c, 0.0) + n
    return best_i, by, float(best)


def _tensor_peak(events: list[Any]) -> float:
    """Largest sum of live tensor bytes, workspaces left out (what the CPU
    traces of training/memtrace measure)."""
    cur = best = 0
    for e in events:
        if e.category == "workspace":
            continue
        cur += e.nbytes if e.kind == "+" else -e.nbytes
        best = max(best, cur)
    return float(best)


def _assumptions(mg: Any, prec: str, opts: Any, arch: str, lazy: bool,
                 coeffs: cuda_context.ContextCoeffs, fused_attention: bool = True) -> list[str]:
    out = list(mg.notes)
    out.append("PyTorch eager, one stream, default caching allocator (no expandable segments); "
               "autograd's saved tensors per op as derivatives.yaml keeps them "
               "(perfseer_rt/gpu/autograd_rules.py)")
    if opts.training:
        out.append("eval-mode ONNX export: Dropout is gone from the graph and not counted (a model "
                   "trained with dropout also keeps a 1-byte mask per dropped activation)")
    out.append("in-place activations where the model could run them in place (nn.ReLU(inplace=True), "
               "ResNet's x += shortcut); "
               + ("fused scaled-dot-product attention where the graph has the MatMul-Softmax-MatMul pattern"
                  if fused_attention else "attention materialised (the score matrix is a tensor of its own)"))
    out.append(f"cuBLAS workspace {opts.cublas_bytes / MIB:g} MiB per handle ({arch}); "
               "cuDNN convolution workspaces not counted (per call, freed after it)")
    out.append(f"CUDA context ESTIMATE ({'lazy' if lazy else 'eager'} module loading): "
               f"stack reservation + {coeffs.fixed_mib:g} MiB fixed + library kernels; {coeffs.source}")
    if mg.unknown_ops:
        out.append("ops without a memory rule (taken as keeping their inputs): "
                   + ", ".join(sorted(set(mg.unknown_ops))))
    return out
