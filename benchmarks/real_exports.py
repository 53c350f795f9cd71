"""Real exports from today's toolchains through the extractor (issue 13:
every real model; the fuzzer covers broken files, this covers valid ones).

Sections (``--only`` picks some):

* ``hf``: one published architecture per family of
  :data:`training.zoo.real.hf_text.ARCHITECTURES` (24 families), exported by
  torch's TorchScript exporter (``dynamo=False``) and by its default dynamo
  exporter, structure-only, seq 128; extracted at batch 2.
* ``torchvision``: 18 classification models, both exporters, dynamic batch;
  extracted at batch 1 and 8.
* ``ort-optimizer``: BERT, DistilBERT, RoBERTa, GPT-2 and a T5 encoder
  (both exporters, with weights) through onnxruntime's transformer optimizer
  (``optimize_model``, fusions at opt level 1) and its float16 conversion.
* ``detection``: torchvision's detectors (SSD300, SSDlite320, RetinaNet,
  FCOS, Faster/Mask/Keypoint R-CNN: NonZero, TopK, NonMaxSuppression, If and
  Loop in their post-processing) and segmenters (FCN, DeepLabV3, LR-ASPP),
  random weights, TorchScript exporter, one 3 x 512 x 512 image (320 for
  the ``_320`` models); every edge tensor's extracted shape is compared
  with onnxruntime running the model on a random image: equal, or above it
  dim by dim where the size depends on the data (the extractor assumes the
  upper bound: :mod:`perfseer_rt.graph.data_dependent`); below it or of
  another rank fails.
* ``hf-vision``: transformers' audio and vision models (wav2vec2, the
  Whisper encoder, DETR, YOLOS, SegFormer, CLIP's vision tower,
  Mask2Former; since 2026-11-25 also RT-DETR, MobileViT, LeViT, ConvNeXt-V2,
  Swin2SR, SAM's image encoder, Hiera, DINOv2, wav2vec2-Conformer) in small
  configurations, random weights, TorchScript
  exporter, dynamic batch; extracted at batch 2 and checked as ``detection``
  is (random input at the extracted shapes).
* ``tf2onnx``: Keras models (seven applications, an LSTM/GRU stack, attention,
  upsampling, a Conv1D + SimpleRNN) converted by tf2onnx under the interpreter
  given with ``--tf-python`` (TensorFlow and tf2onnx do not share this
  project's environment; ``benchmarks/tf_export.py``), checked as
  ``detection`` is (at batch 1, random input); a file onnxruntime refuses is
  the converter's failure (reported, not a failed check).
* ``video``: torchvision's video classifiers (R3D, MC3, R(2+1)D, S3D,
  MViT-v2, Swin3D: 5-D convolutions and pooling; MViT's TorchScript export
  keeps Python lists as ONNX sequences built in one-iteration Loops),
  random weights, dynamic batch, 16 frames; extracted at batch 1 and checked
  as ``detection`` is (onnxruntime's run in chunks of outputs).
* ``moe``: transformers' mixture-of-experts LMs (Mixtral, Qwen2-MoE, OLMoE,
  Jamba, DeepSeek-V3; small configurations, the eager experts loop: a OneHot routing mask, one
  NonZero per expert), TorchScript exporter, dynamic batch and sequence;
  extracted at batch 2 and the traced 128 tokens (Jamba's Mamba scan is
  unrolled over them: its file runs at that length only) and checked as
  ``detection`` is, except that
  the tokens routed to each expert are an estimate (an even share,
  :mod:`perfseer_rt.graph.data_dependent`): a tensor below onnxruntime's
  passes only downstream of a routing NonZero, and each layer's routed
  total must equal onnxruntime's.
* ``pyg``: PyTorch Geometric's GCN, GAT and GraphSAGE layers (self loops
  removed and added with NonZero, scatter reductions, PyG's ``if x.dim()``
  switches as If nodes on a condition computed from shapes), TorchScript
  exporter, dynamic node and edge counts; extracted at 50 nodes and 200
  edges and checked as ``detection`` is.
* ``ultralytics``: Ultralytics YOLO (v8, v10, 11, 26; detection, segmentation,
  pose, oriented boxes, classification; dynamic and static, simplified by
  onnxslim, with NMS in the graph) exported by ``yolo export`` under the
  interpreter given with ``--ul-python`` (``benchmarks/ultralytics_export.py``),
  checked as ``detection`` is at batch 2 (static: 1), 640 x 640.
* ``optimum``: optimum-onnx's exports (``optimum-cli export onnx``) of small
  GPT-2 and LLaMA (with their KV cache: the mask's dim is named
  ``past_sequence_length + sequence_length``), T5 and Whisper (encoder,
  decoder, decoder with past, and the merged decoder whose If switches the
  cache), BERT and ViT, under the interpreter given with
  ``--optimum-python`` (``benchmarks/optimum_export.py``); each file
  extracted at :data:`OPTIMUM_DIMS` and checked as ``detection`` is (a
  merged decoder run on the branch extraction took).
* ``jax2onnx``: Flax (nnx) models (a CNN with batch norm, a transformer
  block, a two-block LM with int32 ids) and a jax.numpy attention function
  exported by jax2onnx under the interpreter given with ``--jax-python``
  (``benchmarks/jax_export.py``), symbolic dims ``B`` and ``T``; extracted
  at B 2, T 12 and checked as ``detection`` is.
* ``genai``: :mod:`training.zoo.real.genai` (onnxruntime-genai's model
  builder: LLaMA, Qwen2, Qwen3, Mistral, Gemma2 at int4 and fp32; GPT-OSS,
  onnxruntime's MoE op, at fp32), extracted
  at a prompt (16 new tokens) and a decode step (1 new, 15 cached) with the
  KV cache's ``kv_cache_dim`` (and Gemma2's sliding-window cache length
  ``past_sliding_length``) left to the extractor; every tensor's shape is
  compared with onnxruntime running the model at the extracted input shapes.

Checked per model: it extracts, no op is unknown, and the FLOPs agree with
the peer (the TorchScript export; the unfused model) within 2 %. One JSON
line per model on stdout (and appended to ``--out``), a summary at the end;
exit 1 if any check fails. Exports go to a temporary folder. Needs torch,
transformers, torchvision (``ort-optimizer``: onnxruntime's transformers
tools; ``genai``: onnxruntime-genai, skipped when absent).

Run: ``python -m benchmarks.real_exports [--only hf genai] [--out F.jsonl]``
(~25 CPU-minutes in all, most of it exporting).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from perfseer_rt import extract  # noqa: E402
from perfseer_rt.graph import data_dependent, layout  # noqa: E402
from perfseer_rt.graph.perfgraph import PerfGraph  # noqa: E402
from tests.contrib_models import run_shapes  # noqa: E402
from training.zoo.export import export_onnx, strip_weights  # noqa: E402
from training.zoo.real.torchvision_compat import (  # noqa: E402
    export_kernels,
    import_transformers,
    importable_torchvision,
)

FLOPS = layout.NODE_COLUMNS.index("flops")
#: Largest relative FLOPs difference from the peer export that passes.
FLOPS_TOLERANCE = 0.02
TORCHVISION = ("swin_t", "swin_v2_t", "vit_b_16", "maxvit_t", "convnext_tiny", "regnet_y_400mf",
               "efficientnet_v2_s", "mobilenet_v3_large", "shufflenet_v2_x1_0", "densenet121",
               "inception_v3", "googlenet", "mnasnet1_0", "squeezenet1_1", "resnext50_32x4d",
               "wide_resnet50_2", "alexnet", "vgg11_bn")
#: (architecture, onnxruntime's model_type, heads, hidden) for the optimizer.
OPTIMIZED = (("bert-base", "bert", 12, 768), ("distilbert-base", "bert", 12, 768),
             ("roberta-base", "bert", 12, 768), ("gpt2", "gpt2", 12, 768),
             ("t5-small-encoder", "t5", 8, 512))


def summary(g: PerfGraph, seconds: float) -> dict:
    return {"nodes": g.num_nodes, "unknown": sorted(set(g.unknown_ops)),
            "gflops": float(g.x[:, FLOPS].sum()) / 1e9, "extract_ms": round(seconds * 1e3, 1),
            "exporter": g.info["exporter"]}


def timed_extract(path: Path, **kw) -> dict:
    t = time.process_time()
    g = extract(path, **kw)
    return summary(g, time.process_time() - t)


class ExportFailed(Exception):
    """The toolchain could not write the model (its limit, not the extractor's)."""


def exported(fn: Callable[[], object]) -> None:
    """Run an export step; its failure becomes :class:`ExportFailed`."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - reported as the toolchain's
        raise ExportFailed(f"{type(exc).__name__}: {exc}"[:400]) from exc


def attempt(row: dict, key: str, fn: Callable[[], dict]) -> None:
    """``row[key] = fn()``, or the error in ``row[key + "_error"]``
    (``_export_error`` where the toolchain failed: reported, not a failure)."""
    try:
        row[key] = fn()
    except ExportFailed as exc:
        row[key + "_export_error"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - a finding to report, not to stop on
        row[key + "_error"] = f"{type(exc).__name__}: {exc}"[:400]


def compare(row: dict, key: str, peer: str) -> None:
    if key in row and peer in row and row[peer]["gflops"]:
        row[f"{key}_flops_ratio"] = round(row[key]["gflops"] / row[peer]["gflops"], 4)


def extracting(export: Callable[[], object], path: Path, **kw) -> dict:
    """Export (:func:`exported`), then extract ``path``."""
    exported(export)
    return timed_extract(path, **kw)


def hf(tmp: Path) -> Iterator[dict]:
    from training.zoo.real.hf_text import ARCHITECTURES
    from training.zoo.spec import parse_spec

    firsts: dict[str, str] = {}
    for name, (family, *_) in ARCHITECTURES.items():
        firsts.setdefault(family, name)
    for name in firsts.values():
        row: dict = {"section": "hf", "model": name}
        for exporter in ("torchscript", "dynamo"):
            path = tmp / f"{name}-{exporter}.onnx"
            export = partial(export_onnx, parse_spec(f"hf:model={name},seq=128"), path,
                             structure_only=True, exporter=exporter)
            attempt(row, exporter, partial(extracting, export, path, batch=2))
        compare(row, "dynamo", "torchscript")
        yield row


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


def optimize(src: Path, out: Path, model_type: str, heads: int, hidden: int, fp16: bool) -> None:
    """onnxruntime's transformer optimizer (fusions at opt level 1), then
    optionally its float16 conversion (inputs and outputs kept float32)."""
    from onnxruntime.transformers.optimizer import optimize_model

    opt = optimize_model(str(src), model_type=model_type, num_heads=heads, hidden_size=hidden,
                         opt_level=1, use_gpu=False)
    if fp16:
        opt.convert_float_to_float16(keep_io_types=True)
    opt.save_model_to_file(str(out))


def ort_optimizer(tmp: Path) -> Iterator[dict]:
    from training.zoo.spec import parse_spec

    for name, model_type, heads, hidden in OPTIMIZED:
        for exporter in ("torchscript", "dynamo"):
            row: dict = {"section": "ort-optimizer", "model": name, "exporter": exporter}
            path = tmp / f"{name}-{exporter}-full.onnx"
            export = partial(export_onnx, parse_spec(f"hf:model={name},seq=128"), path,
                             exporter=exporter)
            attempt(row, "plain", partial(extracting, export, path, batch=2))
            if "plain" in row:
                for variant in ("fused", "fp16"):
                    out = path.with_name(f"{path.stem}-{variant}.onnx")
                    step = partial(optimize, path, out, model_type, heads, hidden, variant == "fp16")
                    attempt(row, variant, partial(extracting, step, out, batch=2))
                    compare(row, variant, "plain")
            yield row


def genai_check(proto: onnx.ModelProto, dims: dict[str, int]) -> dict:
    """Extract a GenAI model at ``dims`` and compare every tensor's shape
    with onnxruntime running it at the extracted input shapes."""
    t = time.process_time()
    g = extract(proto, dims=dims)
    out = summary(g, time.process_time() - t)
    ran = _run_shapes(proto, g.input_shapes)
    ours = dict(zip(g.edge_tensors, g.edge_shapes))
    out["shapes_checked"] = sum(t in ran for t in ours)
    out["shape_mismatches"] = [t for t in ours if t in ran and tuple(ours[t]) != ran[t]][:5]
    out["implied"] = [w.split("'")[1] for w in g.warnings if "was not given" in w]
    return out


def genai(tmp: Path) -> Iterator[dict]:
    from training.zoo.real.genai import ARCHITECTURES, PRECISIONS, build_genai

    for arch in ARCHITECTURES:
        for precision in PRECISIONS.get(arch, ("int4", "fp32")):
            row: dict = {"section": "genai", "model": f"{arch}-{precision}"}
            try:
                proto = build_genai(arch, precision)
            except Exception as exc:  # noqa: BLE001 - the builder's limit: reported
                row["build_export_error"] = f"{type(exc).__name__}: {exc}"[:400]
                yield row
                continue
            for seq, past in ((16, 0), (1, 15)):
                dims = {"batch_size": 2, "sequence_length": seq, "past_sequence_length": past,
                        "total_sequence_length": seq + past}
                attempt(row, f"seq{seq}_past{past}", partial(genai_check, proto, dims))
            yield row


def _run_shapes(proto: onnx.ModelProto, shapes: dict) -> dict:
    """Every node output's shape as onnxruntime computes it on zeros (ones
    for ids and masks) of the extracted input shapes."""
    feeds = {}
    for vi in proto.graph.input:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        fill = np.ones if vi.name in ("input_ids", "attention_mask") else np.zeros
        feeds[vi.name] = fill(shapes[vi.name], dtype)
    return {n: tuple(s) for n, s in run_shapes(proto, feeds).items()}


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


def bound_check(path: Path, image: np.ndarray | None = None, batch: int | None = None,
                dims: dict[str, int] | None = None, ids: int | None = None,
                chunk: int | None = None,
                feeds_for: Callable[[PerfGraph, onnx.ModelProto], dict] | None = None,
                input_shapes: dict[str, tuple[int, ...]] | None = None) -> dict:
    """Extract ``path`` (at ``batch``, ``dims`` and ``input_shapes``) and compare every edge
    tensor's shape with onnxruntime's on ``image`` (default: ``feeds_for``'s
    inputs for the extracted graph, else random inputs of the shapes
    extracted, floats, or token ids below ``ids`` for integer inputs):
    exact, above (an assumed bound) or not. Tensors downstream of a NonZero
    taken as MoE routing are estimates: below passes there, and the routed
    totals are compared instead."""
    t = time.process_time()
    g = extract(path, batch=batch, dims=dims, input_shapes=input_shapes)
    out = summary(g, time.process_time() - t)
    proto = onnx.load(str(path))
    ort.set_default_logger_severity(3)  # Mask R-CNN's loop warns once per detection
    rng = np.random.default_rng(0)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in proto.graph.input}
    feeds = {proto.graph.input[0].name: image} if image is not None else feeds_for(
        g, proto) if feeds_for is not None else {
        name: rng.integers(0, ids or 1, shape).astype(onnx.helper.tensor_dtype_to_np_dtype(
            types[name])) if types[name] in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
        else rng.random(shape, dtype=np.float32) for name, shape in g.input_shapes.items()}
    ran = {n: tuple(s) for n, s in run_shapes(proto, feeds, chunk).items()}
    ours = {t: tuple(s) for t, s in zip(g.edge_tensors, g.edge_shapes) if t in ran}
    above = [t for t, s in ours.items() if s != ran[t] and len(s) == len(ran[t])
             and all(a >= b for a, b in zip(s, ran[t]))]
    routed, totals = _routed(proto, ours, ran)
    estimated = [t for t, s in ours.items() if s != ran[t] and t not in above and t in routed
                 and len(s) == len(ran[t])]
    out["shapes_checked"] = len(ours)
    out["shapes_exact"] = sum(s == ran[t] for t, s in ours.items())
    out["shapes_above"] = len(above)
    if routed:
        out["shapes_routed_below"] = len(estimated)
        out["routed_totals"] = totals
        out["routed_total_mismatches"] = [k for k, (a, b) in totals.items() if a != b]
    out["shape_mismatches"] = [f"{t}: {list(s)} vs {list(ran[t])}" for t, s in ours.items()
                               if s != ran[t] and t not in above and t not in estimated][:5]
    out["warnings"] = [w for w in g.warnings if "depend on the data" in w or "node '" in w
                       or "mixture-of-experts" in w]
    return out


def _routed(proto: onnx.ModelProto, ours: dict, ran: dict
            ) -> tuple[set[str], dict[str, tuple[int, int]]]:
    """The tensors downstream of a NonZero that extraction takes as MoE
    routing (:func:`data_dependent.routing_source`), and per routing mask
    the routed token slots summed over its experts, (ours, onnxruntime's)."""
    producers = {o: n for n in proto.graph.node for o in n.output if o}
    roots: dict[str, str] = {}
    for n in proto.graph.node:
        if n.op_type == "NonZero" and n.input:
            src = data_dependent.routing_source(n.input[0], producers)
            if src is not None:
                roots[n.output[0]] = src.output[0]
    groups = data_dependent.routing_groups(proto.graph.node, producers)
    totals: dict[str, tuple[int, int]] = {}
    for o, mask in roots.items():
        if groups.get(mask, 0) >= 2 and o in ours and o in ran:
            a, b = totals.get(mask, (0, 0))
            totals[mask] = (a + ours[o][1], b + ran[o][1])
    down = set(roots)
    for n in proto.graph.node:  # graph order is topological
        if any(i in down for i in n.input):
            down.update(o for o in n.output if o)
    return (down if totals else set()), totals


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


def refused_by_onnxruntime(path: Path) -> None:
    """ExportFailed where onnxruntime cannot load the converted file."""
    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - the converter wrote an invalid model
        raise ExportFailed(f"onnxruntime refuses the converted model: {exc}"[:400]) from exc


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


#: transformers' MoE LMs: config class -> its settings beyond :data:`MOE_BASE`
#: (Mixtral, Qwen2-MoE, OLMoE: 8 experts, 2 a token; Jamba: Mamba layers and
#: 4 experts every other layer; DeepSeek-V3: a shared expert and MLA attention).
MOE = {"MixtralConfig": {"num_local_experts": 8, "num_experts_per_tok": 2},
       "Qwen2MoeConfig": {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                          "shared_expert_intermediate_size": 128},
       "OlmoeConfig": {"num_experts": 8, "num_experts_per_tok": 2},
       "JambaConfig": {"num_hidden_layers": 4, "num_experts": 4, "num_experts_per_tok": 2,
                       "expert_layer_period": 2, "expert_layer_offset": 1, "attn_layer_period": 2,
                       "attn_layer_offset": 1, "mamba_d_state": 8, "mamba_dt_rank": 8,
                       "use_mamba_kernels": False},
       "DeepseekV3Config": {"num_key_value_heads": 4, "moe_intermediate_size": 32,
                            "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
                            "first_k_dense_replace": 1, "kv_lora_rank": 16, "q_lora_rank": 32,
                            "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
                            "n_group": 1, "topk_group": 1}}
MOE_BASE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2}
MOE_VOCAB = 500
#: Tokens the MoE models are traced and checked at.
MOE_TOKENS = 128


def export_moe(config_class: str, path: Path) -> None:
    """A small MoE LM of ``config_class`` (random weights, eager attention and
    experts), logits, dynamic batch and sequence, TorchScript exporter."""
    import torch

    t = import_transformers()
    config = getattr(t, config_class)(**{**MOE_BASE, **MOE[config_class]}, vocab_size=MOE_VOCAB)
    config.use_cache = False
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"  # the grouped kernels have no ONNX export
    model = t.AutoModelForCausalLM.from_config(config).eval()

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits

    # the trace fixes the loop to the experts its tokens reach (the file runs only
    # on inputs that reach as many): 128 tokens with random weights reach all 8
    ids = torch.randint(0, MOE_VOCAB, (1, MOE_TOKENS), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Logits(), (ids,), str(path), dynamo=False, opset_version=17,
                          input_names=["input_ids"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"}})


def moe_models(tmp: Path) -> Iterator[dict]:
    for config_class in MOE:
        row: dict = {"section": "moe", "model": config_class.removesuffix("Config").lower()}
        path = tmp / f"{config_class}.onnx"
        attempt(row, "torchscript", lambda c=config_class, path=path: (
            exported(lambda: export_moe(c, path)),
            bound_check(path, batch=2, dims={"seq": MOE_TOKENS}, ids=MOE_VOCAB))[1])
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


#: Interpreters of the toolchains that do not share this project's
#: environment, by section (``--tf-python``, ``--ul-python``,
#: ``--optimum-python``, ``--jax-python``); a section without one is skipped.
TOOLCHAINS: dict[str, str] = {}
#: Each such section's export script (``ok NAME`` / ``failed NAME: error`` lines).
EXPORT_SCRIPTS = {"tf2onnx": "tf_export.py", "ultralytics": "ultralytics_export.py",
                  "optimum": "optimum_export.py", "jax2onnx": "jax_export.py"}


def exported_by(section: str, tmp: Path) -> Iterator[tuple[str, str | None]]:
    """Run ``section``'s export script under its interpreter into ``tmp``:
    (model name, None) per model written, (name, error) per failure."""
    script = ROOT / "benchmarks" / EXPORT_SCRIPTS[section]
    run = subprocess.run([TOOLCHAINS[section], str(script), str(tmp)], capture_output=True,
                         text=True, timeout=3600, check=False)
    for line in run.stdout.splitlines():
        status, _, rest = line.partition(" ")
        if status in ("ok", "failed"):
            yield rest.split(":")[0], (rest if status == "failed" else None)


def toolchain_rows(section: str, key: str, tmp: Path,
                   check: Callable[[str, Path], dict]) -> Iterator[dict]:
    """One row per model ``section``'s export script writes: ``check(name,
    path)`` under ``key``, or the exporter's error."""
    for name, error in exported_by(section, tmp):
        row: dict = {"section": section, "model": name}
        if error is not None:
            row[f"{section}_export_error"] = error
        else:
            attempt(row, key, partial(check, name, tmp / f"{name}.onnx"))
        yield row


def tf2onnx_models(tmp: Path) -> Iterator[dict]:
    return toolchain_rows("tf2onnx", "tf2onnx", tmp, lambda name, path: (
        refused_by_onnxruntime(path), bound_check(path))[1])


def ultralytics_models(tmp: Path) -> Iterator[dict]:
    def check(name: str, path: Path) -> dict:
        static = name.endswith("-static")
        return bound_check(path, batch=None if static else 2,
                           dims=None if static else {"height": 640, "width": 640})

    return toolchain_rows("ultralytics", "yolo", tmp, check)


def jax2onnx_models(tmp: Path) -> Iterator[dict]:
    return toolchain_rows("jax2onnx", "jax2onnx", tmp, lambda name, path: bound_check(
        path, dims={"B": 2, "T": 12}, ids=1000))


#: The dims optimum's exports are extracted at (Whisper's encoder takes 3,000
#: frames, which its decoders see as 1,500 encoder states).
OPTIMUM_DIMS = {"batch_size": 2, "sequence_length": 8, "past_sequence_length": 5,
                "encoder_sequence_length": 16, "decoder_sequence_length": 8,
                "past_decoder_sequence_length": 5, "num_channels": 3, "height": 64,
                "width": 64, "feature_size": 80}
WHISPER_FRAMES = {"encoder_model.onnx": 3000, "*": 1500}


def _optimum_feeds(g: PerfGraph, proto: onnx.ModelProto) -> dict:
    """Inputs for an optimum export at the extracted shapes: ones for ids,
    masks and positions, random floats, and a merged decoder's
    ``use_cache_branch`` set to the branch extraction took."""
    rng = np.random.default_rng(0)
    took_cache = any("(then_branch)" in w for w in g.warnings)
    feeds = {}
    for vi in proto.graph.input:
        shape, elem = g.input_shapes[vi.name], vi.type.tensor_type.elem_type
        if elem == onnx.TensorProto.BOOL:
            feeds[vi.name] = np.full(shape, took_cache)
        elif elem == onnx.TensorProto.INT64:
            feeds[vi.name] = np.ones(shape, np.int64)
        else:
            feeds[vi.name] = rng.random(shape, dtype=np.float32)
    return feeds


def optimum_models(tmp: Path) -> Iterator[dict]:
    for name, error in exported_by("optimum", tmp):
        if error is not None:
            yield {"section": "optimum", "model": name, "optimum_export_error": error}
            continue
        for path in sorted((tmp / name).glob("*.onnx")):
            row: dict = {"section": "optimum", "model": f"{name}/{path.name}"}
            dims = dict(OPTIMUM_DIMS)
            if name == "whisper":
                dims["encoder_sequence_length"] = WHISPER_FRAMES.get(path.name,
                                                                     WHISPER_FRAMES["*"])
            attempt(row, "optimum", lambda path=path, dims=dims: bound_check(
                path, dims=dims, feeds_for=_optimum_feeds))
            yield row


SECTIONS: dict[str, Callable[[Path], Iterator[dict]]] = {
    "hf": hf, "torchvision": torchvision, "ort-optimizer": ort_optimizer,
    "detection": vision_tasks, "hf-vision": hf_vision, "tf2onnx": tf2onnx_models,
    "video": video_models, "moe": moe_models, "pyg": pyg_models,
    "ultralytics": ultralytics_models, "optimum": optimum_models, "jax2onnx": jax2onnx_models,
    "genai": genai}


def failures(row: dict) -> list[str]:
    """What fails the checks in one row."""
    out = [k for k in row if k.endswith("_error") and not k.endswith("_export_error")]
    for k, v in row.items():
        if isinstance(v, dict):
            out += [f"{k}: unknown {v['unknown']}"] if v.get("unknown") else []
            out += [f"{k}: shapes {v['shape_mismatches']}"] if v.get("shape_mismatches") else []
            out += [f"{k}: routed totals {v['routed_total_mismatches']}"] \
                if v.get("routed_total_mismatches") else []
        elif k.endswith("_flops_ratio") and abs(v - 1) > FLOPS_TOLERANCE:
            out.append(f"{k} {v}")
    return out


def checked_rows(rows: Iterable[tuple[dict, Callable[[], dict]]], out: Path | None) -> int:
    """For each ``(row, check)``: the check's result (or its error) in
    ``row["check"]``, the row emitted; then a summary line of what failed.
    Returns the exit code (1 when anything failed)."""
    failed, n = [], 0
    for row, check in rows:
        attempt(row, "check", check)
        emit(row, out)
        n += 1
        label = " ".join(str(row[k]) for k in ("model", "exporter", "opset") if k in row)
        failed += [f"{label}: {f}" for f in failures(row) + failures(row.get("check", {}))]
    print(json.dumps({"rows": n, "failed": failed}))
    return 1 if failed else 0


def emit(row: dict, out: Path | None) -> None:
    """Print one row as a JSON line, and append it to ``out`` when given."""
    line = json.dumps(row)
    print(line, flush=True)
    if out:
        with out.open("a") as f:
            f.write(line + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    ap.add_argument("--out", type=Path, help="append each row to this JSON-lines file")
    for section, flag, what in (("tf2onnx", "--tf-python", "tensorflow and tf2onnx"),
                                ("ultralytics", "--ul-python", "ultralytics"),
                                ("optimum", "--optimum-python", "optimum-onnx"),
                                ("jax2onnx", "--jax-python", "jax, flax and jax2onnx")):
        ap.add_argument(flag, dest=section, help=f"an interpreter with {what} (the {section} "
                        "section is skipped without one)")
    args = ap.parse_args()
    TOOLCHAINS.update({s: getattr(args, s) for s in EXPORT_SCRIPTS if getattr(args, s)})
    rows, failed = 0, []
    for section in args.only:
        if section == "genai" and importlib.util.find_spec("onnxruntime_genai") is None:
            print(json.dumps({"section": "genai", "skipped": "onnxruntime-genai not installed"}))
            continue
        if section in EXPORT_SCRIPTS and section not in TOOLCHAINS:
            print(json.dumps({"section": section, "skipped": "no interpreter given for it"}))
            continue
        with tempfile.TemporaryDirectory() as tmp:
            for row in SECTIONS[section](Path(tmp)):
                rows += 1
                emit(row, args.out)
                failed += [f"{section} {row['model']}: {f}" for f in failures(row)]
    print(f"{rows} models, {len(failed)} failed check(s)")
    for f in failed:
        print("  " + f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
