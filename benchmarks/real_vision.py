"""The sections of ``python -m benchmarks.real_exports`` whose models take
images, audio, video clips or graphs, all exported by torch in this
interpreter: ``torchvision`` (classifiers, both exporters), ``detection``
(torchvision's detectors and segmenters), ``hf-vision`` (transformers'
vision and audio models), ``video`` (torchvision's video classifiers) and
``pyg`` (PyTorch Geometric's message-passing layers). Each section is a
function of a temporary folder that yields one row per model.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import numpy as np
import onnx

from benchmarks.real_checks import (
    attempt,
    bound_check,
    compare,
    exported,
    extracting,
    timed_extract,
)
from training.zoo.export import strip_weights
from training.zoo.real.torchvision_compat import (
    export_kernels,
    import_transformers,
    importable_torchvision,
)

TORCHVISION = ("swin_t", "swin_v2_t", "vit_b_16", "maxvit_t", "convnext_tiny", "regnet_y_400mf",
               "efficientnet_v2_s", "mobilenet_v3_large", "shufflenet_v2_x1_0", "densenet121",
               "inception_v3", "googlenet", "mnasnet1_0", "squeezenet1_1", "resnext50_32x4d",
               "wide_resnet50_2", "alexnet", "vgg11_bn")


def export_torchvision(name: str, path: Path, exporter: str) -> None:
    """torchvision's ``name`` (random weights), dynamic batch, structure-only at ``path``."""
    import torch

    importable_torchvision()
    import torchvision as tv  # type: ignore[import-untyped]

    model = getattr(tv.models, name)(weights=None).eval()
    res = 299 if name == "inception_v3" else 224
    x = torch.randn(2, 3, res, res)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            program = torch.onnx.export(model, (x,), dynamo=True, input_names=["x"], verbose=False,
                                        dynamic_shapes=({0: torch.export.Dim("batch")},))
            if program is None:
                raise RuntimeError("the dynamo exporter returned no program")
            proto = program.model_proto
        else:
            buf = io.BytesIO()
            torch.onnx.export(model, (x,), buf, dynamo=False,  # type: ignore[arg-type]
                              opset_version=17, input_names=["x"],
                              output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
            proto = onnx.load_from_string(buf.getvalue())
    strip_weights(proto, path.name + ".data")
    onnx.save(proto, str(path))


def torchvision(tmp: Path) -> Iterator[dict]:
    for name in TORCHVISION:
        row: dict = {"section": "torchvision", "model": name}
        for exporter in ("torchscript", "dynamo"):
            path = tmp / f"{name}-{exporter}.onnx"
            attempt(row, exporter, partial(extracting, partial(export_torchvision, name, path,
                                                               exporter), path, batch=8))
            if exporter in row:
                row[exporter]["gflops_batch1"] = timed_extract(path, batch=1)["gflops"]
        compare(row, "dynamo", "torchscript")
        yield row



DETECTORS = ("ssdlite320_mobilenet_v3_large", "ssd300_vgg16", "retinanet_resnet50_fpn",
             "fcos_resnet50_fpn", "fasterrcnn_mobilenet_v3_large_320_fpn", "maskrcnn_resnet50_fpn",
             "keypointrcnn_resnet50_fpn")
SEGMENTERS = ("fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large")


def export_vision_task(name: str, path: Path) -> np.ndarray:
    """torchvision's detector or segmenter ``name`` (random weights, with
    them) at ``path``; returns the image it is to be run on."""
    import torch

    export_kernels()
    from torchvision.models import detection, segmentation  # type: ignore[import-untyped]

    size = 320 if "_320" in name else 512
    image = torch.rand(3, size, size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in SEGMENTERS:
            model = getattr(segmentation, name)(weights=None, weights_backbone=None).eval()
            torch.onnx.export(model, (image[None],), str(path), dynamo=False, opset_version=17,
                              input_names=["image"], dynamic_axes={"image": {0: "batch"}})
            return image[None].numpy()
        model = getattr(detection, name)(weights=None, weights_backbone=None).eval()
        torch.onnx.export(model, ([image],), str(path), dynamo=False, opset_version=17,
                          input_names=["image"])
        return image.numpy()


def checked_vision_task(name: str, path: Path) -> dict:
    """Export ``name`` (:func:`exported`), then :func:`bound_check` it."""
    images: list[np.ndarray] = []
    exported(lambda: images.append(export_vision_task(name, path)))
    return bound_check(path, images[0])


def vision_tasks(tmp: Path) -> Iterator[dict]:
    for name in DETECTORS + SEGMENTERS:
        row: dict = {"section": "detection", "model": name}
        attempt(row, "torchscript", partial(checked_vision_task, name, tmp / f"{name}.onnx"))
        yield row


def _hf_vision_models() -> dict[str, Callable[[], tuple]]:
    """name -> () -> (model, example input, its dynamic axes)."""
    import torch

    t = import_transformers()
    small = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
             "intermediate_size": 128}
    detr = {"d_model": 64, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
            "decoder_attention_heads": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128}
    return {
        "wav2vec2": lambda: (t.Wav2Vec2Model(t.Wav2Vec2Config(**small)), torch.randn(1, 16000),
                             {0: "batch"}),
        "whisper-encoder": lambda: (t.WhisperModel(t.WhisperConfig(
            d_model=64, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=500,
            pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
            max_source_positions=1500)).get_encoder(), torch.randn(1, 80, 3000), {0: "batch"}),
        "detr": lambda: (t.DetrForObjectDetection(t.DetrConfig(
            use_timm_backbone=False, backbone_config=t.ResNetConfig(), num_queries=20,
            use_pretrained_backbone=False, **detr)), torch.randn(1, 3, 256, 256), {0: "batch"}),
        "yolos": lambda: (t.YolosForObjectDetection(t.YolosConfig(
            image_size=[128, 128], num_detection_tokens=10, **small)),
            torch.randn(1, 3, 128, 128), {0: "batch"}),
        "segformer": lambda: (t.SegformerForSemanticSegmentation(t.SegformerConfig(num_labels=5)),
                              torch.randn(1, 3, 128, 128), {0: "batch"}),
        "clip-vision": lambda: (t.CLIPVisionModel(t.CLIPVisionConfig(
            image_size=64, patch_size=16, **small)), torch.randn(1, 3, 64, 64), {0: "batch"}),
        "mask2former": lambda: (t.Mask2FormerForUniversalSegmentation(t.Mask2FormerConfig()),
                                torch.randn(1, 3, 128, 128), {0: "batch"}),
        # added 2026-11-25 (each extracted exactly when tried)
        "rt-detr": lambda: (t.RTDetrForObjectDetection(t.RTDetrConfig(
            num_queries=30, decoder_layers=1)), torch.randn(1, 3, 128, 128), {0: "batch"}),
        "mobilevit": lambda: (t.MobileViTForImageClassification(t.MobileViTConfig(image_size=64)),
                              torch.randn(1, 3, 64, 64), {0: "batch"}),
        "levit": lambda: (t.LevitForImageClassification(t.LevitConfig(image_size=64)),
                          torch.randn(1, 3, 64, 64), {0: "batch"}),
        "convnextv2": lambda: (t.ConvNextV2ForImageClassification(t.ConvNextV2Config(
            hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1])), torch.randn(1, 3, 64, 64),
            {0: "batch"}),
        "swin2sr": lambda: (t.Swin2SRForImageSuperResolution(t.Swin2SRConfig(
            image_size=32, embed_dim=32, depths=[1, 1], num_heads=[2, 2], window_size=8)),
            torch.randn(1, 3, 32, 32), {0: "batch"}),
        "sam-vision": lambda: (t.SamVisionModel(t.SamVisionConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=128,
            patch_size=16, output_channels=32, window_size=4, global_attn_indexes=[1],
            mlp_dim=128)), torch.randn(1, 3, 128, 128), {0: "batch"}),
        "hiera": lambda: (t.HieraForImageClassification(t.HieraConfig(
            embed_dim=32, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2], image_size=[64, 64],
            patch_stride=[4, 4], patch_size=[7, 7], patch_padding=[3, 3],
            masked_unit_size=[8, 8], query_stride=[2, 2])), torch.randn(1, 3, 64, 64),
            {0: "batch"}),
        "dinov2": lambda: (t.Dinov2Model(t.Dinov2Config(image_size=56, patch_size=14, **small)),
                           torch.randn(1, 3, 70, 70), {0: "batch"}),
        "wav2vec2-conformer": lambda: (t.Wav2Vec2ConformerModel(t.Wav2Vec2ConformerConfig(
            position_embeddings_type="relative", **small)), torch.randn(1, 8000), {0: "batch"}),
    }


def export_hf_vision(build: Callable[[], tuple], path: Path) -> None:
    """A transformers model's first output, exported (TorchScript, with weights) at ``path``."""
    import torch

    class First(torch.nn.Module):
        def __init__(self, model: torch.nn.Module):
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.model(x)
            return out[0] if isinstance(out, (tuple, list)) else next(iter(out.values()))

    model, example, axes = build()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(First(model.eval()), (example,), str(path), dynamo=False,
                          opset_version=17, input_names=["x"], dynamic_axes={"x": axes})


def hf_vision(tmp: Path) -> Iterator[dict]:
    for name, build in _hf_vision_models().items():
        row: dict = {"section": "hf-vision", "model": name}
        path = tmp / f"{name}.onnx"
        attempt(row, "torchscript", lambda build=build, path=path: (
            exported(lambda: export_hf_vision(build, path)), bound_check(path, batch=2))[1])
        yield row


#: torchvision's video classifiers, with their clip (frames, height, width).
VIDEO = {"r3d_18": (16, 112, 112), "mc3_18": (16, 112, 112), "r2plus1d_18": (16, 112, 112),
         "s3d": (16, 224, 224), "mvit_v2_s": (16, 224, 224), "swin3d_t": (16, 224, 224)}


def export_video(name: str, path: Path) -> None:
    """torchvision's video classifier ``name`` (random weights, with them),
    dynamic batch, TorchScript exporter, at ``path``."""
    import torch

    importable_torchvision()
    from torchvision.models import video  # type: ignore[import-untyped]

    clip = torch.rand(1, 3, *VIDEO[name], generator=torch.Generator().manual_seed(0))
    model = getattr(video, name)(weights=None).eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (clip,), str(path), dynamo=False, opset_version=17,
                          input_names=["clip"], dynamic_axes={"clip": {0: "batch"}})


def video_models(tmp: Path) -> Iterator[dict]:
    for name in VIDEO:
        row: dict = {"section": "video", "model": name}
        path = tmp / f"{name}.onnx"
        attempt(row, "torchscript", lambda name=name, path=path: (
            exported(lambda: export_video(name, path)), bound_check(path, batch=1, chunk=600))[1])
        yield row


#: PyG's message-passing layers: name -> (class name, keyword arguments).
PYG = {"gcn": ("GCNConv", {}), "gat": ("GATConv", {"heads": 2}), "sage": ("SAGEConv", {})}
PYG_NODES, PYG_EDGES = 50, 200


def export_pyg(name: str, path: Path) -> None:
    """Two ``name`` layers (16 -> 32 -> 32 features, random weights) on
    node features ``x`` and an edge index ``edges``, TorchScript exporter,
    dynamic node and edge counts."""
    import torch
    import torch_geometric.nn as pyg  # type: ignore[import-untyped]

    cls, kw = PYG[name]
    heads = kw.get("heads", 1)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first = getattr(pyg, cls)(16, 32, **kw)
            self.second = getattr(pyg, cls)(32 * heads, 32, **kw)

        def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
            return self.second(self.first(x, edges).relu(), edges)

    gen = torch.Generator().manual_seed(0)
    x = torch.rand(PYG_NODES, 16, generator=gen)
    edges = torch.randint(0, PYG_NODES, (2, PYG_EDGES), generator=gen)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Net().eval(), (x, edges), str(path), dynamo=False, opset_version=17,
                          input_names=["x", "edges"],
                          dynamic_axes={"x": {0: "nodes"}, "edges": {1: "edges"}})


def pyg_models(tmp: Path) -> Iterator[dict]:
    for name in PYG:
        row: dict = {"section": "pyg", "model": name}
        path = tmp / f"{name}.onnx"
        attempt(row, "torchscript", lambda name=name, path=path: (
            exported(lambda: export_pyg(name, path)),
            bound_check(path, dims={"nodes": PYG_NODES, "edges": PYG_EDGES}, ids=PYG_NODES))[1])
        yield row
