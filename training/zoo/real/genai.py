"""Decoder LLMs as onnxruntime-genai's model builder writes them.

``python -m onnxruntime_genai.models.builder`` turns a saved ``transformers``
model into the ONNX model that onnxruntime-genai runs: GroupQueryAttention
with a KV cache (its last dim the symbolic ``kv_cache_dim``),
SkipSimplifiedLayerNormalization and, at int4, MatMulNBits. This builds one
from a small config with random weights (a few MB), for the extractor's
real-model checks (``tests/models/build.py``, ``benchmarks/real_language.py``).

Needs ``onnxruntime-genai`` (0.18.0 checked), installed with ``--no-deps``
so that it keeps the onnxruntime in use; it is not a dependency of the
project.
"""

from __future__ import annotations

import runpy
import sys
import tempfile
from pathlib import Path

import onnx
from tokenizers import Tokenizer, models, pre_tokenizers

from training.zoo.real.torchvision_compat import import_transformers

#: The architectures checked: the transformers config class and the values
#: that differ from the shared small config below.
ARCHITECTURES: dict[str, tuple[str, dict]] = {
    "llama": ("LlamaConfig", {}),
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {"head_dim": None}),  # head_dim: hidden / heads
    "mistral": ("MistralConfig", {}),
    "gemma2": ("Gemma2Config", {"head_dim": None}),
    # a mixture of experts (onnxruntime's MoE op) and a sliding-window layer;
    # the builder's int4 path needs the MXFP4 checkpoint: fp32 only
    "gpt-oss": ("GptOssConfig", {"head_dim": None, "num_local_experts": 4,
                                 "num_experts_per_tok": 2, "sliding_window": 128,
                                 "layer_types": ["sliding_attention", "full_attention"]}),
}
#: The precisions each architecture builds at (default: int4 and fp32).
PRECISIONS: dict[str, tuple[str, ...]] = {"gpt-oss": ("fp32",)}
#: Model sizes: ``small`` (2 layers, hidden 256 over 4 query heads of 64 and
#: 2 KV heads; for shape checks) and ``base`` (6 layers, hidden 768, 12 heads,
#: 4 KV heads, 65 M parameters; for measuring).
SIZES = {
    "small": {"vocab_size": 1024, "hidden_size": 256, "intermediate_size": 512,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 512},
    "base": {"vocab_size": 16384, "hidden_size": 768, "intermediate_size": 2048,
             "num_hidden_layers": 6, "num_attention_heads": 12, "num_key_value_heads": 4,
             "max_position_embeddings": 2048},
}


def build_genai(arch: str, precision: str, size: str = "small") -> onnx.ModelProto:
    """The builder's CPU model of ``arch`` (a key of :data:`ARCHITECTURES`)
    at ``precision`` (``int4``, ``fp32``, ``fp16``) and ``size`` (a key of
    :data:`SIZES`), weights included. The builder also needs a tokenizer,
    which it only copies: a word-level one is made."""
    transformers = import_transformers()
    config_class, overrides = ARCHITECTURES[arch]
    shape = SIZES[size]
    head = shape["hidden_size"] // shape["num_attention_heads"]
    overrides = {k: (head if k == "head_dim" else v) for k, v in overrides.items()}
    cfg = getattr(transformers, config_class)(**{**shape, **overrides})
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "hf", Path(tmp) / "out"
        transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(src)
        words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(shape["vocab_size"])},
                                           unk_token="t0"))
        words.pre_tokenizer = pre_tokenizers.Whitespace()
        transformers.PreTrainedTokenizerFast(
            tokenizer_object=words, unk_token="t0", bos_token="t1", eos_token="t2",
            pad_token="t0").save_pretrained(src)
        argv = sys.argv
        sys.argv = ["builder", "-i", str(src), "-o", str(out), "-p", precision, "-e", "cpu",
                    "-c", str(Path(tmp) / "cache")]
        try:
            runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__")
        finally:
            sys.argv = argv
        return onnx.load(str(out / "model.onnx"))
