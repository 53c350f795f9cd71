"""The allocation/free order of an inference or a training step, simulated.

From a :class:`~perfseer_rt.gpu.mem_graph.MemGraph` this module writes the
sequence of tensor allocations and frees PyTorch eager makes, in order, as
:class:`Event` rows (the same form as the CPU traces of
``training/memtrace``), so that the caching allocator
(:mod:`perfseer_rt.gpu.allocator`) and the live-byte peak can be computed
over it. Every tensor is reference-counted: a forward consumer, a unit that
saved it for backward, a pinned model output each hold one reference; the
tensor is freed when the last one is dropped.

A training step (``zero_grad(set_to_none=True)`` at its end, PyTorch's
default):

1. the batch is copied to the device (the graph inputs, the int64 targets);
2. forward, unit by unit in the graph's order (:mod:`.autograd_rules`:
   outputs new / views / in place, what each unit saves, autocast casts);
3. the loss: cross-entropy over the last axis of the largest output
   (``log_softmax`` keeps its fp32 output);
4. backward, unit by unit in reverse, for the units the loss reaches: each
   input that needs a gradient receives one (accumulated in place where
   PyTorch can), weights receive gradients, a unit's saved tensors and its
   outputs' gradients are freed once it has run;
5. ``optimizer.step()`` (:mod:`.optimizers`; state created at the first
   step), then the gradients are freed.

Library workspaces are allocations too: cuBLAS's per handle and stream
(:mod:`.cuda_context`) at the first matrix product of the forward (main
thread) and of the backward (autograd's device thread has its own handle);
they are never freed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perfseer_rt.gpu.mem_graph import MemGraph, Unit
from perfseer_rt.gpu.optimizers import OptimizerRule
from perfseer_rt.gpu.precision import Precision

#: Units that call cuBLAS (a handle's workspace is allocated at the first one).
BLAS_OPS = frozenset({"MatMul", "Gemm", "Linear", "Einsum", "Attention", "LSTM", "GRU", "RNN"})
#: Units that use cublasLt's separate workspace (``addmm`` with a bias: Linear layers).
BLASLT_OPS = frozenset({"Gemm", "Linear"})
#: Autocast classes of the CUDA lists that read 16-bit inputs without a copy.
NO_CAST_FP32 = frozenset({"Softmax", "LogSoftmax", "ReduceSum", "CumSum"})

CATEGORIES = ("weights", "buffers", "batch", "activations", "weight_casts", "activation_gradients",
              "gradients", "optimizer_state", "optimizer_temporaries", "workspace", "loss")


@dataclass
class Event:
    kind: str      #: "+" allocation, "-" free
    key: int
    nbytes: int
    phase: str
    category: str
    op: str = ""   #: the unit that allocated it (for reading a schedule)


@dataclass
class Options:
    precision: Precision
    training: bool
    optimizer: OptimizerRule | None = None
    weight_decay: bool = False
    policy: str = "cuda"              #: autocast lists: "cuda" or "cpu" (validation only)
    cublas_bytes: int = 0             #: per handle
    cublaslt_bytes: int = 0           #: per handle, where Linear/Gemm units run
    steps: int = 2


@dataclass
class _Sim:
    events: list[Event] = field(default_factory=list)
    refs: dict[int, int] = field(default_factory=dict)
    size: dict[int, int] = field(default_factory=dict)
    cat: dict[int, str] = field(default_factory=dict)
    phase: str = "setup"
    op: str = ""
    next_key: int = 0

    def alloc(self, nbytes: float, category: str, refs: int = 1) -> int:
        k = self.next_key
        self.next_key += 1
        n = max(int(round(nbytes)), 1)
        self.size[k], self.cat[k] = n, category
        self.refs[k] = refs
        self.events.append(Event("+", k, n, self.phase, category, self.op))
        if refs <= 0:
            self._free(k)
        return k

    def ref(self, k: int, n: int = 1) -> None:
        self.refs[k] += n

    def unref(self, k: int | None, n: int = 1) -> None:
        if k is None or k not in self.refs:
            return
        self.refs[k] -= n
        if self.refs[k] <= 0:
            self._free(k)

    def _free(self, k: int) -> None:
        del self.refs[k]
        self.events.append(Event("-", k, self.size[k], self.phase, self.cat[k]))


class Schedule:
    """Builds the event list of one run (see the module doc)."""

    def __init__(self, mg: MemGraph, opts: Options, param_scale: float = 1.0) -> None:
        """``param_scale``: the exact weight bytes over the per-use sum (below 1
        when several nodes share a weight)."""
        self.mg, self.o, self.param_scale = mg, opts, param_scale
        self.sim = _Sim()
        self.item: dict[str, float] = {}
        self.cast_in: dict[tuple[int, str], float] = {}   #: (unit, tensor) -> bytes/elem of its cast copy
        self._dtypes()
        self.params: list[tuple[int, float]] = []         #: (unit, bytes) of each parameter tensor
        self.handles = 0

    # ------------------------------------------------------------ dtypes
    def _dtypes(self) -> None:
        p, mg = self.o.precision, self.mg
        half = p.act_bytes
        for name in mg.inputs:
            self.item[name] = mg.tensors[name].itemsize
        for k, u in enumerate(mg.units):
            ins = [(t, self.item.get(t, mg.tensors[t].itemsize)) for t in u.inputs]
            floats = [b for t, b in ins if mg.tensors[t].float_ and b in (2.0, 4.0)]
            if not p.autocast:
                for t in u.outputs:
                    t0 = mg.tensors[t]
                    self.item[t] = half if (t0.float_ and t0.itemsize == 4.0 and p.act_bytes == 2.0) \
                        else t0.itemsize
                continue
            cls = u.rule.amp
            if self.o.policy == "cpu" and cls == "fp32":
                cls = "pass"
            if cls == "lowp":
                out = half
                for t, b in ins:
                    if mg.tensors[t].float_ and b == 4.0:
                        self.cast_in[(k, t)] = half
            elif cls == "fp32":
                out = 4.0
                if u.op not in NO_CAST_FP32:
                    for t, b in ins:
                        if mg.tensors[t].float_ and b == 2.0:
                            self.cast_in[(k, t)] = 4.0
            else:   # the input's dtype; mixed inputs (a weight among them) promote to the wider
                widths = floats + ([p.weight_bytes] if u.weight_bytes else [])
                out = max(widths) if widths else None  # type: ignore[assignment]
                if self.o.policy == "cpu" and u.op == "Concat" and out == 4.0:
                    for t, b in ins:   # CPU autocast's "promote" policy casts cat's inputs
                        if mg.tensors[t].float_ and b == 2.0:
                            self.cast_in[(k, t)] = 4.0
            for t in u.outputs:
                t0 = mg.tensors[t]
                self.item[t] = out if (out is not None and t0.float_ and t0.itemsize in (2.0, 4.0)) \
                    else t0.itemsize

    def nbytes(self, t: str) -> float:
        return self.mg.tensors[t].elems * self.item.get(t, self.mg.tensors[t].itemsize)

    def _pbytes(self, exported: float) -> float:
        """Bytes of a parameter exported as fp32 (or 16-bit) in this run's precision."""
        return exported * self.param_scale * self.o.precision.weight_bytes / 4.0

    # ------------------------------------------------------------- setup
    def setup(self) -> None:
        """Parameters and buffers, one allocation per tensor (``model.cuda()``)."""
        s = self.sim
        s.phase = "setup"
        for k, u in enumerate(self.mg.units):
            if u.weight_bytes <= 0:
                continue
            main = u.weight_bytes - u.bias_bytes
            parts = [b for b in (main, u.bias_bytes) if b > 0]
            if u.folded_bn:  # conv weight, BN weight (gamma), BN bias (the folded bias)
                parts = [main, u.channels * 4.0, u.bias_bytes or u.channels * 4.0]
            for b in parts:
                nb = self._pbytes(b)
                s.alloc(nb, "weights")
                self.params.append((k, nb))
            if u.folded_bn:  # running mean, running var, num_batches_tracked
                for b in (u.channels * self.o.precision.weight_bytes,) * 2 + (8.0,):
                    s.alloc(b, "buffers")

    # ----------------------------------------------------------- forward
    def _workspace(self, u: Unit, have: set[str]) -> None:
        if u.op in BLAS_OPS and "blas" not in have and self.o.cublas_bytes:
            self.sim.alloc(self.o.cublas_bytes, "workspace")
            have.add("blas")
            self.handles += 1
        if u.op in BLASLT_OPS and "lt" not in have and self.o.cublaslt_bytes:
            self.sim.alloc(self.o.cublaslt_bytes, "workspace")
            have.add("lt")

    def forward(self, ws: set[str]) -> dict[str, Any]:
        """Events of the forward; returns the state backward needs."""
        s, mg, tr = self.sim, self.mg, self.o.training
        s.phase = "forward"
        store: dict[str, int] = {}          # tensor -> storage key
        transposed: set[str] = set()
        heads_major: set[str] = set()       # attention outputs: stored (B, S, H, D), seen as (B, H, S, D)
        attn_inputs: dict[str, list[int]] = {}   # tensor -> q/k/v storages its consumers keep alive
        saved: dict[int, list[int]] = {}    # unit -> storage keys it holds
        keep: dict[int, list[int]] = {}     # unit -> extra allocations it holds
        casts: dict[int, list[int]] = {}
        batch = []
        for name in mg.inputs:
            ti = mg.tensors[name]
            item = self.o.precision.act_bytes if (ti.itemsize == 4.0 and ti.float_ and not
                                                  self.o.precision.autocast) else ti.itemsize
            store[name] = s.alloc(ti.elems * item, "batch", refs=1 + len(ti.consumers))
            batch.append(store[name])
        outputs = [t for u in mg.units for t in u.outputs if not mg.tensors[t].consumers]
        release: dict[int, list[int]] = {}   # unit -> storages held for callers until it has run
        for k, u in enumerate(mg.units):
            s.op = u.op
            self._workspace(u, ws)
            r = u.rule
            held: list[int] = []
            cast_keys: dict[str, int] = {}
            for t in u.inputs:
                c = self.cast_in.get((k, t))
                if c is not None and t in store:
                    cast_keys[t] = s.alloc(mg.tensors[t].elems * c, "activations")
            if self.o.precision.autocast and r.amp == "lowp" and u.weight_bytes > 0:
                wc = s.alloc(u.weight_bytes / 2.0, "weight_casts")   # fp16/bf16 copy, cached
                casts[k] = [wc]
            raw = None
            if u.folded_bn:   # the convolution's own output, then BatchNorm's
                raw = s.alloc(self.nbytes(u.outputs[0]), "activations")
            for t in u.outputs:
                tt = mg.tensors[t]
                n_refs = len(tt.consumers) + (1 if not tt.consumers else 0)
                src = u.inputs[0] if u.inputs else None
                mode = r.out
                if mode == "view" and u.op in ("Reshape", "Flatten") and src in transposed:
                    mode = "new"
                if mode == "view" and u.op == "Gather" and u.weight_bytes > 0:
                    mode = "new"  # an embedding lookup
                if mode == "inplace" and not self._inplace_ok(u, src, store, saved):
                    mode = "new"
                if mode == "inplace_add" and not self._inplace_add_ok(u, src, store, saved):
                    mode = "new"
                if mode in ("view", "inplace", "inplace_add") and src is not None and src in store:
                    store[t] = store[src]
                    s.ref(store[t], n_refs)
                    if mode == "view" and u.op == "Transpose" and src in heads_major:
                        pass   # back to the layout the attention kernel wrote: contiguous
                    elif mode == "view" and (u.op == "Transpose" or src in transposed):
                        transposed.add(t)
                    if mode == "view" and src in attn_inputs:
                        attn_inputs[t] = attn_inputs[src]
                else:
                    store[t] = s.alloc(self.nbytes(t), "activations", refs=n_refs)
                if t in mg.hold:
                    s.ref(store[t])
                    release.setdefault(mg.hold[t], []).append(store[t])
                if u.op == "Attention":
                    heads_major.add(t)
                    # the attention module's locals (q, k, v) live until it returns,
                    # after its output projection
                    keys = [store[x] for x in u.inputs if x in store]
                    for key in keys:
                        s.ref(key)
                    attn_inputs[t] = keys
            if tr:
                held += self._saves(k, u, store, cast_keys)
                extra = self._extra_bytes(u)
                if extra:
                    keep[k] = [s.alloc(extra, "activations")]
                if raw is not None:
                    held.append(raw)
                    keep.setdefault(k, []).append(s.alloc(u.channels * 8.0, "activations"))  # BN stats
            elif raw is not None:
                s.unref(raw)
            saved[k] = held
            if u.op in ("Linear", "Gemm", "MatMul") and u.weight_bytes > 0:
                for x in u.inputs:
                    for key in attn_inputs.pop(x, []):
                        s.unref(key)
            for key in cast_keys.values():
                s.unref(key)
            for t in u.inputs:
                if t in store:
                    s.unref(store[t])
            for key in release.pop(k, []):
                s.unref(key)
        for keys in {id(v): v for v in attn_inputs.values()}.values():
            for key in keys:
                s.unref(key)
        if not tr:
            for k in list(casts):
                for key in casts.pop(k):
                    s.unref(key)
        return {"store": store, "saved": saved, "keep": keep, "casts": casts, "batch": batch,
                "outputs": outputs}

    def _inplace_ok(self, u: Unit, src: str | None, store: dict[str, int],
                    saved: dict[int, list[int]]) -> bool:
        if src is None or src not in store or src in self.mg.inputs:
            return False
        t = self.mg.tensors[src]
        if len(t.consumers) != 1 or t.producer < 0:
            return False
        prod = self.mg.units[t.producer]
        return prod.rule.saves not in ("out", "both") and store[src] not in saved.get(t.producer, [])

    def _inplace_add_ok(self, u: Unit, src: str | None, store: dict[str, int],
                        saved: dict[int, list[int]]) -> bool:
        if not self._inplace_ok(u, src, store, saved) or src is None:
            return False
        prod = self.mg.units[self.mg.tensors[src].producer]
        return prod.op in ("Conv", "BatchNormalization") and (prod.folded_bn or prod.op == "BatchNormalization")

    def _saves(self, k: int, u: Unit, store: dict[str, int], cast_keys: dict[str, int]) -> list[int]:
        s, mg, r = self.sim, self.mg, self.mg.units[k].rule
        chosen: list[str] = []
        ins = [t for t in u.inputs if t in store]
        if r.saves in ("in", "both"):
            chosen += ins
        elif r.saves == "in0":
            chosen += ins[:1]
        elif r.saves == "cross":
            for i, t in enumerate(ins):
                partners = [x for j, x in enumerate(ins) if j != i]
                if u.weight_bytes > 0 or any(mg.tensors[x].grad for x in partners):
                    chosen.append(t)
        if r.saves in ("out", "both"):
            chosen += [t for t in u.outputs if t in store]
        keys = []
        for t in dict.fromkeys(chosen):
            key = cast_keys.get(t, store[t])
            s.ref(key)
            keys.append(key)
        return keys

    def _extra_bytes(self, u: Unit) -> float:
        e = u.rule.extra
        out = self.mg.tensors[u.outputs[0]].elems if u.outputs else 0.0
        if e == "indices":
            return out * 8.0
        if e == "mask":
            return out * 1.0
        if e == "ln_stats":
            return u.rows * 8.0
        if e == "bn_stats":
            return u.channels * 8.0
        if e == "lse":
            return u.attn_rows * 4.0
        return 0.0

    # -------------------------------------------------------------- loss
    def loss(self, st: dict[str, Any]) -> tuple[str | None, list[int]]:
        """Cross-entropy events over the largest output; returns the logits
        tensor and the keys backward frees."""
        s, mg = self.sim, self.mg
        s.phase = "loss"
        cands = [t for t in st["outputs"] if mg.tensors[t].grad]
        if not cands:
            return None, []
        logits = max(cands, key=self.nbytes)
        elems = mg.tensors[logits].elems
        rows = max(elems / max(self._last_dim(logits), 1.0), 1.0)
        st["targets"] = s.alloc(rows * 8.0, "batch")
        held = []
        src_item = self.item.get(logits, 4.0)
        cast = None
        if self.o.precision.autocast and self.o.policy == "cpu" and src_item == 2.0:
            cast = s.alloc(elems * 4.0, "loss")
        held.append(s.alloc(elems * 4.0, "loss"))   # log_softmax output, kept
        s.unref(cast)
        return logits, held

    def _last_dim(self, t: str) -> float:
        u = self.mg.units[self.mg.tensors[t].producer]
        return u.channels or 1.0

    # ---------------------------------------------------------- backward
    def backward(self, st: dict[str, Any], logits: str | None, held: list[int], ws: set[str]) -> list[int]:
        """Events of the backward; returns the gradients' keys (one per
        parameter tensor) for the optimizer."""
        s, mg = self.sim, self.mg
        s.phase = "backward"
        store, saved, keep, casts = st["store"], st["saved"], st["keep"], st["casts"]
        grad: dict[str, int] = {}
        pgrads: list[int] = []
        if logits is not None:
            elems = mg.tensors[logits].elems
            g_ls = s.alloc(elems * 4.0, "activation_gradients")
            for k in held:
                s.unref(k)
            item = self.item.get(logits, 4.0)
            if self.o.precision.autocast and self.o.policy == "cpu" and item == 2.0:
                g32 = s.alloc(elems * 4.0, "activation_gradients")
                s.unref(g_ls)
                g_ls = g32
            grad[logits] = s.alloc(elems * item, "activation_gradients")
            s.unref(g_ls)
        pbytes: dict[int, list[float]] = {}
        for k, nb in self.params:
            pbytes.setdefault(k, []).append(nb)
        for k in range(len(mg.units) - 1, -1, -1):
            u = mg.units[k]
            outs = [t for t in u.outputs if t in grad]
            if not outs:
                continue
            s.op = u.op
            self._workspace(u, ws)
            r = u.rule
            g_raw = None
            if u.folded_bn:  # BatchNorm's backward first: the gradient of the conv output
                g_raw = s.alloc(self.nbytes(u.outputs[0]), "activation_gradients")
            for t in u.inputs:
                tt = mg.tensors[t]
                if not tt.grad or t not in store:
                    continue
                if r.grad == "alias":
                    s.ref(grad[outs[0]])
                    self._accumulate(grad, t, grad[outs[0]], fresh=False)
                    continue
                c = self.cast_in.get((k, t))
                if c is not None:   # the cast copy's gradient, then ToCopyBackward's
                    g16 = s.alloc(tt.elems * c, "activation_gradients")
                    g = s.alloc(self.nbytes(t), "activation_gradients")
                    s.unref(g16)
                else:
                    g = s.alloc(self.nbytes(t), "activation_gradients")
                self._accumulate(grad, t, g, fresh=True)
            for nb in pbytes.get(k, []):
                if self.o.precision.autocast and r.amp == "lowp":
                    g16 = s.alloc(nb / 2.0, "gradients")
                    pg = s.alloc(nb, "gradients")
                    s.unref(g16)
                else:
                    pg = s.alloc(nb, "gradients")
                pgrads.append(pg)
            s.unref(g_raw)
            for t in outs:
                s.unref(grad.pop(t))
            for key in saved.pop(k, []):
                s.unref(key)
            for key in keep.pop(k, []):
                s.unref(key)
            for key in casts.pop(k, []):
                s.unref(key)
        for key in list(grad.values()):
            s.unref(key)
        # what the forward kept for units the loss does not reach
        for lst in list(saved.values()) + list(keep.values()) + list(casts.values()):
            for key in lst:
                s.unref(key)
        return pgrads

    def _accumulate(self, grad: dict[str, int], t: str, g: int, fresh: bool) -> None:
        """Add gradient ``g`` of tensor ``t`` into its buffer (PyTorch's
        InputBuffer: in place when the buffer is not shared, else a new sum)."""
        s = self.sim
        old = grad.get(t)
        if old is None:
            grad[t] = g
            return
        if s.refs.get(old, 0) > 1:
            new = s.alloc(self.nbytes(t), "activation_gradients")
            s.unref(old)
            grad[t] = new
        s.unref(g)

    # --------------------------------------------------------- optimizer
    def step(self, pgrads: list[int], state: list[int], first: bool) -> None:
        s, o = self.sim, self.o.optimizer
        if o is None:
            return
        s.phase = "optimizer"
        sizes = [s.size[g] for g in pgrads]
        if first:
            for nb in sizes:
                for _ in range(o.state):
                    state.append(s.alloc(nb, "optimizer_state"))
        temps = o.temporaries + (1 if self.o.weight_decay and o.decay_list else 0)
        tk = [s.alloc(nb, "optimizer_temporaries") for _ in range(temps) for nb in sizes]
        for k in tk:
            s.unref(k)
        s.phase = "zero_grad"
        for g in pgrads:
            s.unref(g)

    # -------------------------------------------------------------- runs
    def run(self) -> list[Event]:
        """The whole run: setup, then ``steps`` inferences or training steps."""
        self.setup()
        ws: set[str] = set()
        ws_bwd: set[str] = set()
        state: list[int] = []
        for i in range(self.o.steps):
            st = self.forward(ws)
            if self.o.training:
                logits, held = self.loss(st)
                pgrads = self.backward(st, logits, held, ws_bwd)
                self.sim.phase = "backward"
                for t in st["outputs"]:
                    self.sim.unref(st["store"].get(t))
                self.sim.unref(st.get("targets"))
                for k in st["batch"]:
                    self.sim.unref(k)
                self.step(pgrads, state, first=(i == 0))
            else:
                for t in st["outputs"]:
                    self.sim.unref(st["store"].get(t))
                for k in st["batch"]:
                    self.sim.unref(k)
            self.sim.phase = f"end-{i}"
        return self.sim.events
