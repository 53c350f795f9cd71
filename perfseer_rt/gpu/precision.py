"""Numeric precision as PyTorch runs a model on an NVIDIA GPU: the one source
of truth for ``--precision`` on GPU devices.

==============  =================================================================================
``precision``   what runs (PyTorch >= 1.12 defaults unless said otherwise)
==============  =================================================================================
``fp32``        an fp32 model with PyTorch's defaults: convolutions through cuDNN with TF32
                (``torch.backends.cudnn.allow_tf32 = True``) on GPUs that have TF32 tensor
                cores (Ampere and newer); matmuls in full fp32
                (``torch.backends.cuda.matmul.allow_tf32 = False``)
``tf32``        fp32 with TF32 for matmuls too (``torch.set_float32_matmul_precision("high")``)
``fp32-strict`` no TF32 anywhere (both flags off)
``amp-fp16``    ``torch.autocast("cuda", torch.float16)``: convolutions, matmuls, linears and
                attention in fp16 on tensor cores with fp32 accumulate; softmax, layer/group
                norm, reductions and losses in fp32 (autocast's fp32 list); other ops in the
                widest dtype of their inputs; fp32 weights cast to fp16 once per step
``amp-bf16``    the same with bfloat16
``fp16``        a half model (``model.half()``): every tensor fp16; matmuls on tensor cores with
                fp32 accumulate (cuBLAS's default compute type)
``bf16``        a bfloat16 model (``model.to(torch.bfloat16)``)
==============  =================================================================================

Peaks: a GEMM-like kernel (conv, linear, batched matmul, fused attention)
is priced on the spec sheet's peak for its input dtype and the math mode:
fp32 -> ``fp32_gflops``; TF32 -> ``tf32_gflops``; fp16 -> ``fp16_fp32acc_gflops``
(the fp32-accumulate rate: half the fp16-accumulate rate on GeForce cards);
bf16 -> ``bf16_gflops``. Grouped and depthwise convolutions never use the
tensor-core peak (cuDNN runs them on CUDA cores).
"""

from __future__ import annotations

from dataclasses import dataclass

from perfseer_rt.errors import PerfSeerError

#: Accepted older spellings -> the precision they meant.
ALIASES = {"fp16-tc": "fp16", "bf16-tc": "bf16"}


@dataclass(frozen=True)
class Precision:
    """How one ``--precision`` runs (see the module table)."""

    name: str
    #: bytes per element of activations produced by GEMM-like ops (the
    #: autocast dtype) and of weights as stored
    half: bool
    #: autocast: fp32 weights, fp32-list ops produce fp32, casts inserted
    autocast: bool
    #: ``"fp16"`` or ``"bf16"`` for half precisions, else ``"fp32"``
    dtype: str
    tf32_conv: bool
    tf32_matmul: bool
    meaning: str

    @property
    def act_bytes(self) -> float:
        """Bytes per element of a tensor in the compute dtype."""
        return 2.0 if self.half else 4.0

    @property
    def weight_bytes(self) -> float:
        """Bytes per stored weight element (AMP keeps fp32 weights)."""
        return 2.0 if self.half and not self.autocast else 4.0


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("fp32", False, False, "fp32", True, False,
              "fp32 model, PyTorch defaults: convolutions in TF32 (cuDNN) on GPUs with TF32 tensor "
              "cores, matmuls in fp32"),
    Precision("tf32", False, False, "fp32", True, True,
              "fp32 model with TF32 matmuls and convolutions (set_float32_matmul_precision('high'))"),
    Precision("fp32-strict", False, False, "fp32", False, False,
              "fp32 model, no TF32 anywhere"),
    Precision("amp-fp16", True, True, "fp16", False, False,
              "torch.autocast float16: convs/matmuls/attention in fp16 with fp32 accumulate on tensor "
              "cores; softmax, norms, reductions in fp32; fp32 weights cast to fp16 each step"),
    Precision("amp-bf16", True, True, "bf16", False, False,
              "torch.autocast bfloat16: as amp-fp16 with bfloat16"),
    Precision("fp16", True, False, "fp16", False, False,
              "half model (model.half()): every tensor fp16, tensor cores with fp32 accumulate"),
    Precision("bf16", True, False, "bf16", False, False,
              "bfloat16 model: every tensor bf16, tensor cores with fp32 accumulate"),
)}
DEFAULT = "fp32"


def get_precision(name: str | None) -> Precision:
    """The :class:`Precision` called ``name`` (default fp32; older aliases
    accepted).

    Raises:
        PerfSeerError: an unknown name (the message lists the known ones).
    """
    key = ALIASES.get(name or DEFAULT, name or DEFAULT)
    if key not in PRECISIONS:
        raise PerfSeerError(f"precision {name!r}: expected one of {', '.join(PRECISIONS)}")
    return PRECISIONS[key]
