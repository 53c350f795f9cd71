"""Training and inference precisions as PyTorch runs them (memory view).

==========  =================  ==============  =================================
name        weights, grads,    activations     what PyTorch does
            optimizer state
==========  =================  ==============  =================================
fp32        fp32               fp32            plain fp32
tf32        fp32               fp32            fp32 storage; TF32 tensor-core math
amp-fp16    fp32 (+ fp16       per op (below)  ``torch.autocast("cuda", float16)``
            casts of weights)                  with ``GradScaler``
amp-bf16    fp32 (+ bf16       per op          ``torch.autocast("cuda", bfloat16)``
            casts)
bf16        bf16               bf16            ``model.to(torch.bfloat16)``
fp16        fp16               fp16            ``model.half()``
==========  =================  ==============  =================================

Under autocast each op runs at the class :mod:`perfseer_rt.gpu.autograd_rules`
gives it (``aten/src/ATen/autocast_mode.cpp``): ``lowp`` ops cast their
fp32 inputs to 16 bits (a copy; a weight's copy is cached for the
forward and kept while autograd needs it) and write 16-bit outputs;
``fp32`` ops cast 16-bit inputs up (softmax and log_softmax read 16 bits
and write fp32 without a copy) and write fp32; other ops run in their
input's dtype, promoting mixed inputs to the wider one. ``policy="cpu"``
applies the CPU autocast lists instead (softmax, layer_norm and group_norm
are not fp32 ops there; the loss casts its input to fp32): used only to
check the rules against CPU measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfseer_rt.errors import PerfSeerError


@dataclass(frozen=True)
class Precision:
    name: str
    param_bytes: float      #: bytes per weight / gradient / optimizer-state element
    act_bytes: float        #: bytes per float activation element (outside autocast rules)
    autocast: bool          #: per-op autocast rules apply


PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", 4.0, 4.0, False),
    "tf32": Precision("tf32", 4.0, 4.0, False),
    "amp-fp16": Precision("amp-fp16", 4.0, 2.0, True),
    "amp-bf16": Precision("amp-bf16", 4.0, 2.0, True),
    "bf16": Precision("bf16", 2.0, 2.0, False),
    "fp16": Precision("fp16", 2.0, 2.0, False),
}
#: Older spellings: the prior's tensor-core assumption stored every tensor in 16 bits.
ALIASES = {"fp16-tc": "fp16", "bf16-tc": "bf16", "amp": "amp-fp16", "float32": "fp32"}


def precision(name: str | None) -> Precision:
    """The :class:`Precision` named ``name`` (None: fp32).

    Raises:
        PerfSeerError: an unknown name.
    """
    key = ALIASES.get((name or "fp32").lower(), (name or "fp32").lower())
    p = PRECISIONS.get(key)
    if p is None:
        raise PerfSeerError(f"precision {name!r}: expected one of {', '.join(PRECISIONS)}")
    return p
