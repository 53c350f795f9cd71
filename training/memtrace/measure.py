"""One traced run: a few training steps (or inferences) of a case under
:class:`~training.memtrace.trace.AllocTrace`, summarised as one record.

A training step is what users run: batch copied in, forward (under
``torch.autocast("cpu", bfloat16)`` for ``amp-bf16``), cross-entropy over
the last axis of the output (random targets), ``backward()``,
``optimizer.step()`` with ``foreach=True`` (the implementation PyTorch
picks on CUDA; on CPU it would default to the per-parameter loop), and
``zero_grad(set_to_none=True)``. Three steps run; the record keeps each
step's peak of live tensor bytes and the composition of the live set at
the overall peak.
"""

from __future__ import annotations

import platform
from typing import Any

import torch
import torch.nn.functional as F

from perfseer_rt.gpu import allocator
from training.memtrace.models import Case, example
from training.memtrace.trace import AllocTrace, Event, live_at, peak

OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.01, foreach=True),
    "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, foreach=True),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3, foreach=True),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, foreach=True),
    "adadelta": lambda p: torch.optim.Adadelta(p, foreach=True),
}
STEPS = 3


def _ce(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), target)


def run(case: Case, batch: int, mode: str, optimizer: str | None, precision: str) -> dict[str, Any]:
    """Trace ``STEPS`` steps of ``case`` and return the record's ``measured`` block."""
    assert case.build is not None
    model = case.build(False)
    model.train(mode == "train")
    x0 = example(case, batch)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = OPTIMIZERS[optimizer](params) if mode == "train" and optimizer else None
    tr = AllocTrace()
    tr.adopt(params, "weights")
    tr.adopt(list(model.buffers()), "buffers")
    starts = []
    labels: dict[int, str] = {}
    amp = precision == "amp-bf16"
    with tr:
        for _ in range(STEPS):
            starts.append(len(tr.events))
            with tr.phase("batch"):
                x = x0.clone()
            if mode == "train":
                with tr.phase("forward"), torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                    out = model(x)
                    rows = out.numel() // out.shape[-1]
                    with tr.phase("loss"):
                        target = torch.randint(0, out.shape[-1], (rows,), generator=torch.Generator().manual_seed(0))
                        loss = _ce(out, target)
                with tr.phase("backward"):
                    loss.backward()
                del out, loss, target, x
                for p in params:
                    e = tr.event_of(p.grad) if p.grad is not None else None
                    if e is not None:
                        labels[id(e)] = "gradients"
                assert opt is not None
                with tr.phase("optimizer"):
                    opt.step()
                for st in opt.state.values():
                    for v in st.values():
                        e = tr.event_of(v) if isinstance(v, torch.Tensor) and v.dim() > 0 else None
                        if e is not None:
                            labels[id(e)] = "optimizer_state"
                with tr.phase("zero_grad"):
                    opt.zero_grad(set_to_none=True)
            else:
                with tr.phase("forward"), torch.no_grad(), \
                        torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                    out = model(x)
                del out, x
    tr.recording = False
    ev = tr.events
    attention_ops = {e.op for e in ev if "attention" in e.op or "sdpa" in e.op}
    per_step = []
    for i, s in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(ev)
        per_step.append(peak(ev[:end], s)[0])
    best, at, _ = peak(ev, 0)
    comp = _composition(tr, ev, at, labels)
    # the measured request sequence through the caching allocator's rules
    alloc = allocator.replay((e.kind, e.key, e.nbytes) for e in ev)
    return {"tensor_peak_bytes": best, "per_step_peak_bytes": per_step, "peak_phase": ev[at].phase,
            "peak_op": ev[at].op, "composition_at_peak_bytes": comp, "events": len(ev),
            "param_bytes": sum(p.numel() * p.element_size() for p in params),
            "attention_ops": sorted(attention_ops),
            "replay_allocated_peak_bytes": alloc.peak_allocated, "replay_reserved_peak_bytes": alloc.peak_reserved}


#: Phase of a trace event -> the part it is counted in.
_PHASE_PART = {"forward": "activations", "loss": "loss", "backward": "activation_gradients",
               "optimizer": "optimizer_temporaries", "batch": "batch"}


def _composition(tr: AllocTrace, ev: list[Event], at: int, labels: dict[int, str]) -> dict[str, int]:
    alive = live_at(ev, at)
    out: dict[str, int] = {}
    for key, e in alive.items():
        cat = tr.label.get(key) or labels.get(id(e)) or _PHASE_PART.get(e.phase, e.phase)
        out[cat] = out.get(cat, 0) + e.nbytes
    return out


def environment() -> dict[str, str]:
    """What the record was measured with."""
    # lazy: timm and transformers, loaded only when their models are traced
    import timm
    import transformers
    return {"torch": torch.__version__, "timm": timm.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "machine": platform.machine(),
            "cpu": platform.processor() or platform.machine(), "threads": str(torch.get_num_threads())}
