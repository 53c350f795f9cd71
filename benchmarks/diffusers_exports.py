"""Diffusion models (Hugging Face diffusers) through both torch exporters
and the extractor, each checked as ``benchmarks.real_exports``' detection
section is (every edge tensor's extracted shape against onnxruntime's run
on random input).

Small random-weight configurations of six architectures: a text-conditioned
UNet (Stable Diffusion's), an unconditional UNet (DDPM's), the VAE's encoder
and decoder, a DiT and a ControlNet; each exported by the TorchScript
exporter at opset 17 and by the dynamo exporter at opsets 18 and 21 (at 21
GroupNormalization is written as one node, an op whose onnx schema has no
shape inference). A dynamic batch axis is checked at batch 1 and 3; where
``torch.export`` cannot make the batch dynamic the model is exported with
its example batch (``"static": true``) and checked at it.

Run: ``python -m benchmarks.diffusers_exports [--out F.jsonl]`` (needs
``pip install diffusers``; ~5 CPU-minutes).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.real_checks import attempt, bound_check, checked_rows, exported  # noqa: E402
from training.zoo.real.torchvision_compat import importable_torchvision  # noqa: E402

#: (exporter, opset) pairs each model is written with.
EXPORTS = (("torchscript", 17), ("dynamo", 18), ("dynamo", 21))


def _builders() -> dict[str, Callable[[], tuple]]:
    """name -> () -> (module, example args, input names), random weights."""
    import torch

    importable_torchvision()  # diffusers imports transformers, which imports torchvision
    import diffusers as d

    class Out(torch.nn.Module):
        """The model's first output as a plain tensor (or its tuple, flattened)."""

        def __init__(self, model: torch.nn.Module, call: Callable) -> None:
            super().__init__()
            self.model, self.call = model, call

        def forward(self, *args):
            return self.call(self.model, *args)

    def sample(model, *args):
        return model(*args).sample

    def unet_cond():
        m = d.UNet2DConditionModel(
            sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
            block_out_channels=(32, 64), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
            attention_head_dim=8, norm_num_groups=8)
        return Out(m, sample), (torch.randn(2, 4, 16, 16), torch.tensor([10, 10]),
                                torch.randn(2, 7, 32)), ["sample", "timestep", "text"]

    def unet2d():
        m = d.UNet2DModel(
            sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
            block_out_channels=(32, 64), down_block_types=("DownBlock2D", "AttnDownBlock2D"),
            up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=8)
        return Out(m, sample), (torch.randn(2, 3, 16, 16), torch.tensor([5, 5])), ["sample", "timestep"]

    def vae():
        return d.AutoencoderKL(
            in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
            up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(32, 64),
            layers_per_block=1, latent_channels=4, norm_num_groups=8)

    def vae_encoder():
        return Out(vae(), lambda m, x: m.encode(x).latent_dist.mean), (torch.randn(2, 3, 32, 32),), ["x"]

    def vae_decoder():
        return Out(vae(), lambda m, z: m.decode(z).sample), (torch.randn(2, 4, 8, 8),), ["z"]

    def dit():
        m = d.DiTTransformer2DModel(
            num_attention_heads=2, attention_head_dim=16, in_channels=4, num_layers=2,
            sample_size=8, patch_size=2, num_embeds_ada_norm=1000, norm_num_groups=8)
        return Out(m, sample), (torch.randn(2, 4, 8, 8), torch.tensor([3, 3]),
                                torch.tensor([1, 2])), ["latent", "timestep", "label"]

    def controlnet():
        m = d.ControlNetModel(
            in_channels=4, layers_per_block=1, block_out_channels=(32, 64),
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), cross_attention_dim=32,
            attention_head_dim=8, norm_num_groups=8, conditioning_embedding_out_channels=(16, 32))

        def residuals(model, x, t, text, cond):
            down, mid = model(x, t, text, controlnet_cond=cond, return_dict=False)
            return (*down, mid)
        return Out(m, residuals), (torch.randn(2, 4, 16, 16), torch.tensor([10, 10]),
                                   torch.randn(2, 7, 32), torch.randn(2, 3, 32, 32)), \
            ["sample", "timestep", "text", "cond"]

    return {"unet_text_conditioned": unet_cond, "unet_unconditional": unet2d,
            "vae_encoder": vae_encoder, "vae_decoder": vae_decoder, "dit": dit,
            "controlnet": controlnet}


def export(build: Callable[[], tuple], exporter: str, opset: int, path: Path) -> bool:
    """Write the model at ``path``; True when its batch axis is dynamic."""
    import torch

    model, args, names = build()
    model.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(model, args, str(path), input_names=names, opset_version=opset,
                              dynamic_axes={n: {0: "batch"} for n in names}, dynamo=False)
            return True
        batch = torch.export.Dim("batch", min=1, max=64)
        try:
            torch.onnx.export(model, args, str(path), input_names=names, opset_version=opset,
                              dynamic_shapes={"args": tuple({0: batch} for _ in names)}, dynamo=True,
                              external_data=False, verbose=False)
            return True
        except Exception:  # noqa: BLE001 - torch.export's limit: the example batch then
            torch.onnx.export(model, args, str(path), input_names=names, opset_version=opset,
                              dynamo=True, external_data=False, verbose=False)
            return False


def check(build: Callable[[], tuple], exporter: str, opset: int, path: Path) -> dict:
    dynamic: list[bool] = []
    exported(lambda: dynamic.append(export(build, exporter, opset, path)))
    ops = Counter(n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node)
    out: dict = {"static": not dynamic[0],
                 "norm_ops": {k: v for k, v in sorted(ops.items()) if "Normalization" in k}}
    for batch in ((1, 3) if dynamic[0] else (None,)):
        attempt(out, f"batch_{batch or 'example'}", lambda b=batch: bound_check(path, batch=b))
    return out


def check_in_temp(build: Callable[[], tuple], exporter: str, opset: int) -> dict:
    """:func:`check` with the export in a temporary folder."""
    with tempfile.TemporaryDirectory() as tmp:
        return check(build, exporter, opset, Path(tmp) / "model.onnx")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="append each row to this JSON-lines file")
    args = ap.parse_args()
    return checked_rows((({"section": "diffusers", "model": name, "exporter": exporter, "opset": opset},
                          partial(check_in_temp, build, exporter, opset))
                         for name, build in _builders().items() for exporter, opset in EXPORTS),
                        args.out)


if __name__ == "__main__":
    sys.exit(main())
