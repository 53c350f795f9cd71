"""The models whose allocations are traced (``python -m training.memtrace.run``).

Each case builds a fresh model with random weights: timm CNNs and ViTs at a
small resolution, HF BERT / GPT-2 configurations (SDPA attention for
training, PyTorch's default; the eager attention for the ONNX export, which
the TorchScript exporter traces into MatMul-Softmax-MatMul), and MLPs.
Dropout is 0 everywhere: on CPU ``F.dropout`` keeps a float noise tensor
where CUDA's fused kernel keeps a 1-byte mask, so dropout would measure
CPU behaviour the GPU rules do not claim. BatchNorm affine parameters and
statistics are randomised before the export so that the exporter's folding
gives distinct weights (with timm's zero-initialised last BN of a block,
folded weights are all zero and the exporter merges identical
initializers).

``FAMILIES`` names each case's architecture family; ``DEV_FAMILIES`` are
the families the rules were debugged on (the others are held out: their
errors are reported as measured, without changes made for them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from training.zoo.real.torchvision_compat import import_transformers, importable_torchvision

#: Families the rules were looked at and fixed on; every other family is held out.
DEV_FAMILIES = ("resnet", "vit", "mlp")


@dataclass(frozen=True)
class Case:
    name: str
    family: str
    kind: str                  #: "image" | "text" | "vector"
    shape: tuple[int, ...]     #: input shape without the batch
    vocab: int = 0
    build: Callable[[bool], nn.Module] | None = None   #: build(for_export) -> module


def _timm(name: str, **kw: Any) -> Callable[[bool], nn.Module]:
    def build(for_export: bool) -> nn.Module:
        importable_torchvision()
        # lazy: timm, loaded only when a timm model is built
        import timm
        torch.manual_seed(0)
        m = timm.create_model(name, pretrained=False, num_classes=10, drop_rate=0.0, **kw)
        with torch.no_grad():
            for mod in m.modules():
                if isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.running_var is not None:
                    mod.weight.uniform_(0.5, 1.5)
                    mod.bias.normal_(0, 0.1)
                    assert mod.running_mean is not None
                    mod.running_mean.normal_(0, 0.1)
                    mod.running_var.uniform_(0.5, 1.5)
        return m
    return build


class _Text(nn.Module):
    """One input (ids), one output tensor (logits or the last hidden state)."""

    def __init__(self, model: nn.Module, output: str) -> None:
        super().__init__()
        self.model, self.output = model, output

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.output == "logits":
            out = self.model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
        else:
            out = self.model(input_ids=input_ids)
        return out[self.output]


def _hf(cls: str, causal: bool, **cfg: object) -> Callable[[bool], nn.Module]:
    def build(for_export: bool) -> nn.Module:
        tf = import_transformers()
        torch.manual_seed(0)
        config = getattr(tf, cls)(**cfg)
        config.use_cache = False
        for k in ("hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop",
                  "attn_pdrop", "dropout", "attention_dropout"):
            if hasattr(config, k):
                setattr(config, k, 0.0)
        config._attn_implementation = "eager" if for_export else "sdpa"
        if causal:
            return _Text(tf.AutoModelForCausalLM.from_config(config), "logits")
        return _Text(tf.AutoModel.from_config(config, add_pooling_layer=False), "last_hidden_state")
    return build


def _mlp(widths: tuple[int, ...], act: str, norm: bool = False) -> Callable[[bool], nn.Module]:
    def build(for_export: bool) -> nn.Module:
        torch.manual_seed(0)
        layers: list[nn.Module] = []
        for a, b in zip(widths[:-2], widths[1:-1]):
            layers.append(nn.Linear(a, b))
            if norm:
                layers.append(nn.LayerNorm(b))
            layers.append(nn.ReLU(inplace=True) if act == "relu" else nn.GELU())
        layers.append(nn.Linear(widths[-2], widths[-1]))
        return nn.Sequential(*layers)
    return build


CASES: dict[str, Case] = {c.name: c for c in [
    Case("resnet18", "resnet", "image", (3, 96, 96), build=_timm("resnet18")),
    Case("resnet50", "resnet", "image", (3, 96, 96), build=_timm("resnet50")),
    Case("mobilenetv3_large_100", "mobilenet", "image", (3, 64, 64), build=_timm("mobilenetv3_large_100")),
    Case("efficientnet_b0", "efficientnet", "image", (3, 64, 64), build=_timm("efficientnet_b0")),
    Case("convnext_atto", "convnext", "image", (3, 64, 64), build=_timm("convnext_atto")),
    Case("densenet121", "densenet", "image", (3, 64, 64), build=_timm("densenet121")),
    Case("regnetx_002", "regnet", "image", (3, 64, 64), build=_timm("regnetx_002")),
    Case("vgg11_bn", "vgg", "image", (3, 64, 64), build=_timm("vgg11_bn")),
    Case("vit_tiny_patch16_224", "vit", "image", (3, 96, 96), build=_timm("vit_tiny_patch16_224", img_size=96)),
    Case("vit_small_patch16_224", "vit", "image", (3, 64, 64), build=_timm("vit_small_patch16_224", img_size=64)),
    Case("deit_tiny_patch16_224", "deit", "image", (3, 64, 64), build=_timm("deit_tiny_patch16_224", img_size=64)),
    Case("bert-L4-H256", "bert", "text", (64,), vocab=8000,
         build=_hf("BertConfig", False, vocab_size=8000, hidden_size=256, num_hidden_layers=4,
                   num_attention_heads=4, intermediate_size=1024)),
    Case("gpt2-L2-H256", "gpt2", "text", (64,), vocab=8000,
         build=_hf("GPT2Config", True, vocab_size=8000, n_embd=256, n_layer=2, n_head=4, n_positions=256)),
    Case("mlp-relu-784", "mlp", "vector", (784,), build=_mlp((784, 1024, 1024, 10), "relu")),
    Case("mlp-gelu-ln-512", "mlp", "vector", (512,), build=_mlp((512, 2048, 2048, 2048, 512), "gelu", norm=True)),
    Case("mlp-deep-256", "mlp", "vector", (256,), build=_mlp((256,) * 10 + (10,), "relu")),
]}
#: Batch sizes traced per case.
BATCHES = {"image": (4, 16), "text": (4, 16), "vector": (32, 128)}


def example(case: Case, batch: int) -> torch.Tensor:
    """A deterministic input batch of ``case``."""
    g = torch.Generator().manual_seed(batch)
    if case.kind == "text":
        return torch.randint(0, case.vocab, (batch, *case.shape), generator=g)
    return torch.randn((batch, *case.shape), generator=g)
