"""Static facts of each planned architecture, counted on the CPU: the input of
the window's cost estimate (:mod:`training.campaigns.gpu_window.estimate`).

For each architecture: parameters; forward FLOPs per sample (counted at batch 2)
(``torch.utils.flop_counter.FlopCounterMode``: matmuls, convolutions,
attention); and the number of ATen operators a forward in eval mode and a
training step (forward in train mode, cross-entropy, backward) dispatch,
views and other metadata-only operators excluded: about the number of kernels
PyTorch eager launches per step, whatever the batch. Counted on the ``meta``
device, where ``scaled_dot_product_attention`` runs decomposed (matmul,
softmax, matmul): for models with fused attention the counts are an upper
bound. Nothing here is a timing.

    python -m training.campaigns.gpu_window table     # rewrites arch_table.json (resumable)
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from training.campaigns.gpu_window import build as B
from training.campaigns.gpu_window.archs import Arch, archs
from training.profile_train import default_loss

TABLE = Path(__file__).with_name("arch_table.json")


#: Operators that launch no kernel (metadata, allocation without a fill).
FREE_OPS = frozenset(("detach", "alias", "lift_fresh", "_unsafe_view", "view", "t", "expand", "reshape",
                      "as_strided", "unsqueeze", "squeeze", "permute", "transpose", "slice", "select",
                      "split", "split_with_sizes", "chunk", "unbind", "empty", "empty_like",
                      "empty_strided", "_reshape_alias", "unflatten", "flatten"))


class OpCounter(TorchDispatchMode):
    """Counts dispatched ATen operators that may launch a kernel (not views, not
    :data:`FREE_OPS`)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if not func.is_view and func.overloadpacket.__name__ not in FREE_OPS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def _count(module: torch.nn.Module, arch: Arch, dev: torch.device) -> dict[str, Any]:
    inputs = B.make_inputs(arch, 2, "nchw", dev)  # 2: BatchNorm trains on > 1 value per channel
    module.eval()
    with torch.no_grad():
        fc = FlopCounterMode(display=False)
        with fc:
            module(*inputs)
        ops = OpCounter()
        with ops:
            module(*inputs)
    module.train()
    train_ops = OpCounter()
    with train_ops:
        default_loss(module(*inputs)).backward()
    module.zero_grad(set_to_none=True)
    return {"flops_fwd": int(fc.get_total_flops()) // 2, "ops_fwd": ops.count, "ops_train": train_ops.count,
            "counted_on": dev.type}


def facts(arch: Arch) -> dict[str, Any]:
    """Parameters, forward FLOPs per sample and operator counts of ``arch`` (see
    module doc). Built and counted on the ``meta`` device (shapes only, no
    arithmetic), on the CPU where that fails."""
    t0 = time.perf_counter()
    try:
        module, info = B.build_module(arch, torch.device("meta"))
    except Exception:  # noqa: BLE001 - a constructor that needs values (.item()): build on the CPU
        module, info = B.build_module(arch, torch.device("cpu"))
    out = {"params": info["params_count"], "param_tensors": sum(1 for _ in module.parameters()),
           "attention": info.get("attention")}
    try:
        out.update(_count(module.to("meta"), arch, torch.device("meta")))
    except Exception:  # noqa: BLE001 - an operator without a meta kernel: count on the CPU
        module, _ = B.build_module(arch, torch.device("cpu"))
        out.update(_count(module, arch, torch.device("cpu")))
    out["cpu_s"] = round(time.perf_counter() - t0, 2)
    return out


def load(path: Path = TABLE) -> dict[str, dict[str, Any]]:
    return json.loads(path.read_text())["archs"] if path.is_file() else {}


def main(path: Path = TABLE) -> int:
    """Count every planned architecture not yet in ``path`` (rewritten after each)."""
    table = load(path)
    todo = [a for tier in (1, 2) for a in archs(tier) if a.spec not in table]
    for i, arch in enumerate(todo):
        try:
            table[arch.spec] = facts(arch)
        except Exception as exc:  # noqa: BLE001 - recorded: the estimate uses its kind's median
            table[arch.spec] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        print(f"[{i + 1}/{len(todo)}] {arch.spec}: {table[arch.spec]}", flush=True)
        tmp = path.with_suffix(".tmp")
        doc = {"about": "training.campaigns.gpu_window.table (CPU counts at batch 2; FLOPs per sample)",
               "torch": torch.__version__, "archs": dict(sorted(table.items()))}
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        tmp.replace(path)
    return 0
