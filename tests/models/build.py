"""Build the structure-only real-model ONNX files under ``tests/models/``.

Needs torch and ``transformers`` (not needed by the tests, which only read
the files); the GenAI model also ``onnxruntime-genai`` (0.18.0, installed
with ``--no-deps`` so that it keeps onnxruntime). Every model is built from a config with random weights, exported
with a dynamic batch (and sequence) axis (LLaMA: through torch's dynamo
exporter), and stripped to its structure
(weights >= 1 KiB become external data that is then deleted; the dims stay).
Run: ``python -m tests.models.build`` (a minute or two on one core).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import onnx
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
# The only torchvision wheel here is a CUDA build whose ops fail to register
# under the CPU torch ("operator torchvision::nms does not exist"), and
# transformers imports it when it is installed: its operators are declared
# first, with CPU kernels for exporting the detection model.
from training.zoo.real.torchvision_compat import export_kernels  # noqa: E402

export_kernels()


def build_genai(arch: str, precision: str) -> onnx.ModelProto:
    from training.zoo.real.genai import build_genai as build

    return build(arch, precision)


def strip(proto: onnx.ModelProto, path: Path) -> None:
    """Save ``proto`` structure-only at ``path`` (as the zoo's export does)."""
    from training.zoo.export import strip_weights

    proto = onnx.ModelProto.FromString(proto.SerializeToString())  # callers keep theirs
    strip_weights(proto, path.name + ".data")
    data = path.with_name(path.name + ".data")
    if data.exists():
        data.unlink()
    onnx.save_model(proto, str(path))


class _Kw(torch.nn.Module):
    """Call a transformers model with keyword tensors; return its first output."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *tensors):
        out = self.model(**dict(zip(self.names, tensors)))
        return out[0]


def export(module, args, names, dynamic, path: Path, opset: int = 17, out_names=None):
    if not isinstance(module, _GPT2WithCache):
        module = _Kw(module, names)
    module.eval()
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        f = Path(tmp) / "m.onnx"
        torch.onnx.export(module, args, str(f), input_names=names, output_names=out_names,
                          dynamic_axes=dynamic, opset_version=opset, dynamo=False)
        return onnx.load(str(f))


def swin() -> onnx.ModelProto:
    from transformers import SwinConfig, SwinModel

    cfg = SwinConfig(image_size=64, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                     window_size=4)
    return export(SwinModel(cfg), (torch.randn(1, 3, 64, 64),), ["pixel_values"],
                  {"pixel_values": {0: "batch"}}, None)


def bert(hidden=64, layers=2, heads=2, inter=128):
    from transformers import BertConfig, BertModel

    cfg = BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=inter, vocab_size=1000 if hidden < 768 else 30522)
    ids = torch.ones(1, 16, dtype=torch.long)
    return export(BertModel(cfg), (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"],
                  {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}},
                  None)


class _GPT2WithCache(torch.nn.Module):
    """GPT-2 taking and returning its KV cache as plain tensors."""

    def __init__(self, model, layers):
        super().__init__()
        self.model, self.layers = model, layers

    def forward(self, input_ids, attention_mask, *past):
        from transformers import DynamicCache

        cache = DynamicCache()
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         past_key_values=cache, use_cache=True)
        return out.logits


def gpt2_kv() -> onnx.ModelProto:
    from transformers import GPT2Config, GPT2LMHeadModel

    layers, heads, hd = 2, 2, 16
    cfg = GPT2Config(n_embd=heads * hd, n_layer=layers, n_head=heads, vocab_size=500,
                     n_positions=128)
    model = _GPT2WithCache(GPT2LMHeadModel(cfg), layers)
    past = [torch.randn(1, heads, 3, hd) for _ in range(2 * layers)]
    ids = torch.ones(1, 2, dtype=torch.long)
    mask = torch.ones(1, 5, dtype=torch.long)
    names = ["input_ids", "attention_mask"] + [f"past_{k}_{i}" for i in range(layers) for k in "kv"]
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total_seq"}}
    dyn.update({n: {0: "batch", 2: "past_seq"} for n in names[2:]})
    return export(model, (ids, mask, *past), names, dyn, None)


def llama_dynamo(opset: int) -> onnx.ModelProto:
    """A 2-layer LLaMA (grouped-query attention, RMS norm, rotary, SwiGLU)
    through torch's default exporter (dynamo) at ``opset``: at 23 it writes
    the new standard ops (Attention, RMSNormalization, RotaryEmbedding)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                      max_position_embeddings=128, use_cache=False)
    ids = torch.ones(2, 8, dtype=torch.long)
    dims = {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")}
    prog = torch.onnx.export(LlamaForCausalLM(cfg).eval(), (ids,), dynamo=True, opset_version=opset,
                             dynamic_shapes=(dims,), verbose=False)
    return prog.model_proto


def quantized(proto: onnx.ModelProto) -> onnx.ModelProto:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "f.onnx", Path(tmp) / "q.onnx"
        onnx.save(proto, str(src))
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
        return onnx.load(str(dst))


def fp16(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model in float16: every float tensor, Cast target and constant
    becomes float16 (what onnxconverter-common's float16 conversion does for
    a model without fp32-only ops). torch's ``.half()`` export on CPU keeps
    some MatMul weights in float32, so the conversion is done on the graph."""
    from onnx import numpy_helper

    m = onnx.ModelProto.FromString(proto.SerializeToString())
    f32, f16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16

    def convert(t: onnx.TensorProto) -> None:
        if t.data_type != f32:
            return
        if t.data_location == onnx.TensorProto.EXTERNAL or not (t.raw_data or t.float_data):
            t.data_type = f16
            return
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype("float16"), t.name))

    for t in m.graph.initializer:
        convert(t)
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.type.tensor_type.elem_type == f32:
            vi.type.tensor_type.elem_type = f16
    del m.graph.value_info[:]
    for node in m.graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                convert(a.t)
            elif node.op_type in ("Cast", "ConstantOfShape") and a.name == "to" and a.i == f32:
                a.i = f16
    return m


def ssdlite() -> onnx.ModelProto:
    """torchvision's SSDlite320 (MobileNetV3 backbone) with 3 classes and its
    post-processing: NonZero, TopK, NonMaxSuppression and an If per image."""
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    model = ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=3)
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        f = Path(tmp) / "m.onnx"
        torch.onnx.export(model.eval(), ([torch.rand(3, 320, 320)],), str(f), dynamo=False,
                          opset_version=17, input_names=["image"])
        return onnx.load(str(f))


def mixtral_moe() -> onnx.ModelProto:
    """A small Mixtral (8 experts, 2 a token; transformers' eager experts
    loop: a OneHot routing mask, one NonZero per expert), logits, dynamic
    batch and sequence (benchmarks.real_language.export_moe)."""
    from benchmarks.real_language import export_moe

    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "m.onnx"
        export_moe("MixtralConfig", f)
        return onnx.load(str(f))


def main() -> None:
    torch.manual_seed(0)
    small_bert = bert()
    builders = {
        "swin_tiny.onnx": swin,
        "bert_small.onnx": lambda: small_bert,
        "bert_base.onnx": lambda: bert(768, 12, 12, 3072),
        "gpt2_kv.onnx": gpt2_kv,
        "bert_small_int8.onnx": lambda: quantized(small_bert),
        "bert_small_fp16.onnx": lambda: fp16(small_bert),
        "llama_dynamo_op20.onnx": lambda: llama_dynamo(20),
        "llama_dynamo_op23.onnx": lambda: llama_dynamo(23),
        "genai_llama_int4.onnx": lambda: build_genai("llama", "int4"),
        "ssdlite_detection.onnx": ssdlite,
        "mixtral_moe.onnx": mixtral_moe,
    }
    only = set(sys.argv[1:])
    for name, build in builders.items():
        if only and name not in only:
            continue
        strip(build(), HERE / name)
        print(name, os.path.getsize(HERE / name), "bytes")


if __name__ == "__main__":
    main()
