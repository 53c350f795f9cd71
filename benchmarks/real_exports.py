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
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.real_checks import emit, failures  # noqa: E402
from benchmarks.real_language import genai, hf, moe_models, ort_optimizer  # noqa: E402
from benchmarks.real_toolchains import (  # noqa: E402
    EXPORT_SCRIPTS,
    TOOLCHAINS,
    jax2onnx_models,
    optimum_models,
    tf2onnx_models,
    ultralytics_models,
)
from benchmarks.real_vision import (  # noqa: E402
    hf_vision,
    pyg_models,
    torchvision,
    video_models,
    vision_tasks,
)

SECTIONS: dict[str, Callable[[Path], Iterator[dict]]] = {
    "hf": hf, "torchvision": torchvision, "ort-optimizer": ort_optimizer,
    "detection": vision_tasks, "hf-vision": hf_vision, "tf2onnx": tf2onnx_models,
    "video": video_models, "moe": moe_models, "pyg": pyg_models,
    "ultralytics": ultralytics_models, "optimum": optimum_models, "jax2onnx": jax2onnx_models,
    "genai": genai}



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
