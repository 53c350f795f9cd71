"""Rebuild an architecture as a torch module on the measuring device, make its
inputs, and set a precision the way PyTorch users set it.

* timm: :func:`training.publicgpu.export_one.build` (``timm.create_model(name,
  pretrained=False)``, ``img_size`` passed where the model fixes another
  size: the rule of the public records' ONNX rebuilds), constructed under
  ``torch.device(device)`` so that timm's initialisation runs on the GPU.
* hf: :mod:`training.zoo.real.hf_text` configs, attention through PyTorch's
  fused ``scaled_dot_product_attention`` (``attn_implementation="sdpa"``,
  transformers' default on a GPU) where the model has it, else eager; the
  implementation used is returned (it goes into the record's ``setup``).
* zoo families: :func:`training.zoo.build_model` (deterministic weights, on
  the CPU), then moved to the device. Their attention is materialised
  (softmax(QK^T)V in separate ops), as in their ONNX exports.

Precisions (:mod:`perfseer_rt.gpu.precision`): ``fp32`` = PyTorch's defaults
(cuDNN convolutions in TF32, matmuls in IEEE fp32); ``tf32`` = TF32 for both;
``fp32-strict`` = neither; ``amp-fp16`` / ``amp-bf16`` = ``torch.autocast``
with the fp32 defaults underneath. PyTorch >= 2.9 has a new TF32 API
(``torch.backends.*.fp32_precision``) that refuses to be mixed with the legacy
``allow_tf32`` flags; this module uses the new one where it exists (and only
it), else the legacy flags.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, ContextManager

import torch

from training.campaigns.gpu_window.archs import Arch

#: precision -> (matmul TF32, cuDNN conv TF32, autocast dtype or None)
PRECISIONS: dict[str, tuple[bool, bool, torch.dtype | None]] = {
    "fp32": (False, True, None),
    "tf32": (True, True, None),
    "fp32-strict": (False, False, None),
    "amp-fp16": (False, True, torch.float16),
    "amp-bf16": (False, True, torch.bfloat16),
}


def _new_tf32_api() -> bool:
    return hasattr(torch.backends.cuda.matmul, "fp32_precision")


def _cudnn_conv() -> Any:
    """``torch.backends.cudnn.conv`` (PyTorch >= 2.9; not in torch's type stubs)."""
    return torch.backends.cudnn.conv  # type: ignore[attr-defined]


def set_precision(precision: str) -> None:
    """Set the TF32 flags of ``precision`` (see the module doc)."""
    matmul, conv, _ = PRECISIONS[precision]
    if _new_tf32_api():
        # matmuls through set_float32_matmul_precision: it sets the new flag and the legacy one
        # alike, so code that still reads allow_tf32 / get_float32_matmul_precision sees the same
        torch.set_float32_matmul_precision("high" if matmul else "highest")
        _cudnn_conv().fp32_precision = "tf32" if conv else "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = conv


def saved_precision() -> tuple[Any, Any]:
    """The TF32 settings now (to put back with :func:`restore_precision`)."""
    if _new_tf32_api():
        return torch.backends.cuda.matmul.fp32_precision, _cudnn_conv().fp32_precision
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


def restore_precision(state: tuple[Any, Any]) -> None:
    if _new_tf32_api():
        torch.backends.cuda.matmul.fp32_precision = state[0]
        _cudnn_conv().fp32_precision = state[1]
    else:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = state


def precision_flags() -> dict[str, Any]:
    """The flags as torch reports them now (recorded with every configuration)."""
    if _new_tf32_api():
        return {"api": "fp32_precision", "matmul": torch.backends.cuda.matmul.fp32_precision,
                "cudnn_conv": _cudnn_conv().fp32_precision,
                "cudnn_benchmark": torch.backends.cudnn.benchmark}
    return {"api": "allow_tf32", "matmul": "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee",
            "cudnn_conv": "tf32" if torch.backends.cudnn.allow_tf32 else "ieee",
            "cudnn_benchmark": torch.backends.cudnn.benchmark}


def autocast(precision: str, device: torch.device) -> ContextManager[Any]:
    """``torch.autocast`` for the AMP precisions, else a no-op context."""
    dtype = PRECISIONS[precision][2]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def _hf_module(name: str) -> tuple[torch.nn.Module, str]:
    # lazy: torch, timm and transformers, loaded by the builder that needs them
    from training.zoo.real import hf_text

    transformers = hf_text.import_transformers()
    kind = hf_text.ARCHITECTURES[name][2]
    last_exc: Exception | None = None
    for attn in ("sdpa", "eager"):
        config = hf_text.make_config(name)
        try:
            if kind == "causal":
                model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn)
                out = "logits"
            elif kind == "t5-encoder":
                model = transformers.T5EncoderModel._from_config(config, attn_implementation=attn)
                out = "last_hidden_state"
            else:
                model = transformers.AutoModel.from_config(config, attn_implementation=attn)
                out = "last_hidden_state"
        except (ValueError, ImportError) as exc:  # the model has no such implementation
            last_exc = exc
            continue
        used = getattr(model.config, "_attn_implementation", attn)
        return hf_text._TextModel(model, out), str(used)
    raise RuntimeError(f"hf model {name!r} builds with neither sdpa nor eager attention: {last_exc}")


def build_module(arch: Arch, device: torch.device) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The module of ``arch`` on ``device`` (eval mode) and how it was built:
    ``build_s``, ``params_count``, ``attention``, ``how`` (the rebuild recipe),
    ``img_size_arg`` (timm)."""
    t0 = time.perf_counter()
    info: dict[str, Any] = {}
    if arch.family == "timm":
        # lazy: torch, timm and transformers, loaded by the builder that needs them
        from training.publicgpu.export_one import build as timm_build

        with torch.device(device):
            module, passed, default = timm_build(arch.params["model"], int(arch.params["res"]))
        info.update(how="timm.create_model(model, pretrained=False" + (", img_size=res)" if passed else ")"),
                    img_size_arg=passed, default_res=default, attention="timm-default")
    elif arch.family == "hf":
        with torch.device(device):
            module, attn = _hf_module(arch.params["model"])
        info.update(how=f"training.zoo.real.hf_text config, attn_implementation={attn}", attention=attn)
    else:
        # lazy: torch, timm and transformers, loaded by the builder that needs them
        from training.zoo import ModelConfig, build_model

        module = build_model(ModelConfig(arch.family, arch.params)).to(device)
        info.update(how="training.zoo.build_model(ModelConfig(family, params))",
                    attention="materialised" if arch.text or arch.kind == "vit" else "n/a")
    module = module.to(device).eval()  # anything a constructor made on the host (torch.from_numpy) too
    info["params_count"] = sum(p.numel() for p in module.parameters())
    info["build_s"] = time.perf_counter() - t0
    return module, info


def input_specs(arch: Arch, batch: int) -> list[tuple[str, tuple[int, ...], str, int | None]]:
    """``(name, shape, dtype, high)`` of the model's inputs (the zoo's ``io``)."""
    # lazy: torch, timm and transformers, loaded by the builder that needs them
    from training.zoo.registry import get_family

    ins, _ = get_family(arch.family).io(arch.params, batch)
    return [(t.name, tuple(t.shape), t.dtype, t.high) for t in ins]


def make_inputs(arch: Arch, batch: int, layout: str, device: torch.device) -> list[torch.Tensor]:
    """Random inputs made on ``device`` (images ``randn``, token ids
    ``randint(0, vocab)``), channels-last for ``layout == "nhwc"``."""
    out = []
    for _, shape, dtype, high in input_specs(arch, batch):
        if dtype == "int64":
            t = torch.randint(0, high or 2, shape, device=device, dtype=torch.int64)
        else:
            t = torch.randn(shape, device=device, dtype=getattr(torch, dtype))
            if layout == "nhwc" and t.dim() == 4:
                t = t.contiguous(memory_format=torch.channels_last)
        out.append(t)
    return out


def set_layout(module: torch.nn.Module, layout: str) -> None:
    """Channels-last weights for ``nhwc``, contiguous (NCHW) otherwise."""
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    module.to(memory_format=fmt)  # type: ignore[call-overload]  # torch's stubs omit memory_format
