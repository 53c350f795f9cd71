"""Published text architectures from HF ``transformers``, built from their configs.

``hf:model=bert-base,seq=128``: the named architecture (hyper-parameters of
the published checkpoint, written out in :data:`ARCHITECTURES`) with random
weights, at a sequence length of ``seq`` tokens. Encoders output
``last_hidden_state`` (B, seq, hidden); causal language models output the LM
head's ``logits`` (B, seq, vocab), which is what a user runs. Input:
``input_ids`` (B, seq) int64. Attention is the eager implementation (what
the TorchScript exporter traces) and the KV cache is off.

Each entry names the ``transformers`` config class, the model kind and the
config values that differ from that class's defaults; ``group`` is the
architecture family used for family-held-out splits (e.g. every BERT size
is ``bert``).
"""

from __future__ import annotations

import random

import torch
from torch import nn

from training.zoo.family import Family, Param, TensorSpec, pick
from training.zoo.real.torchvision_compat import import_transformers

#: name -> (group, config class, "encoder" | "causal" | "t5-encoder", config overrides);
#: at most ~165 M parameters each (those added for the untuned checks: up to 494 M),
#: so that an export stays within a minute or two
ARCHITECTURES: dict[str, tuple[str, str, str, dict]] = {
    # BERT (Devlin et al.) and the official small BERTs (Turc et al., google/bert_uncased_L-*_H-*)
    "bert-base": ("bert", "BertConfig", "encoder", {}),
    **{f"bert-L{n}-H{h}": ("bert", "BertConfig", "encoder",
                           {"hidden_size": h, "num_hidden_layers": n, "num_attention_heads": h // 64,
                            "intermediate_size": 4 * h})
       for n, h in ((2, 128), (4, 256), (4, 512), (8, 512), (6, 768), (12, 256), (2, 768), (10, 512))},
    "minilm-L6-H384": ("minilm", "BertConfig", "encoder",
                       {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
                        "intermediate_size": 1536}),
    "minilm-L12-H384": ("minilm", "BertConfig", "encoder",
                        {"hidden_size": 384, "num_hidden_layers": 12, "num_attention_heads": 12,
                         "intermediate_size": 1536}),
    "distilbert-base": ("distilbert", "DistilBertConfig", "encoder", {}),
    "roberta-base": ("roberta", "RobertaConfig", "encoder",
                     {"vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1}),
    "distilroberta-base": ("roberta", "RobertaConfig", "encoder",
                           {"vocab_size": 50265, "max_position_embeddings": 514,
                            "type_vocab_size": 1, "num_hidden_layers": 6}),
    "albert-base-v2": ("albert", "AlbertConfig", "encoder",
                       {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072,
                        "hidden_act": "gelu_new"}),
    "albert-large-v2": ("albert", "AlbertConfig", "encoder",
                        {"hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 4096,
                         "num_hidden_layers": 24, "hidden_act": "gelu_new"}),
    "electra-small": ("electra", "ElectraConfig", "encoder",
                      {"embedding_size": 128, "hidden_size": 256, "num_attention_heads": 4,
                       "intermediate_size": 1024}),
    "electra-base": ("electra", "ElectraConfig", "encoder",
                     {"embedding_size": 768, "hidden_size": 768, "num_attention_heads": 12,
                      "intermediate_size": 3072}),
    "mpnet-base": ("mpnet", "MPNetConfig", "encoder", {}),
    "t5-small-encoder": ("t5", "T5Config", "t5-encoder",
                         {"d_model": 512, "d_ff": 2048, "num_layers": 6, "num_heads": 8}),
    "t5-base-encoder": ("t5", "T5Config", "t5-encoder",
                        {"d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12}),
    "t5-v1_1-small-encoder": ("t5", "T5Config", "t5-encoder",
                              {"d_model": 512, "d_ff": 1024, "num_layers": 8, "num_heads": 6,
                               "feed_forward_proj": "gated-gelu"}),
    # decoders (causal LM, logits)
    "gpt2": ("gpt2", "GPT2Config", "causal", {}),
    "distilgpt2": ("gpt2", "GPT2Config", "causal", {"n_layer": 6}),
    "gpt-neo-125m": ("gpt_neo", "GPTNeoConfig", "causal",
                     {"hidden_size": 768, "num_layers": 12, "num_heads": 12,
                      "attention_types": [[["global", "local"], 6]], "max_position_embeddings": 2048}),
    "opt-125m": ("opt", "OPTConfig", "causal",
                 {"hidden_size": 768, "ffn_dim": 3072, "num_hidden_layers": 12,
                  "num_attention_heads": 12, "vocab_size": 50272, "word_embed_proj_dim": 768}),
    "pythia-70m": ("pythia", "GPTNeoXConfig", "causal",
                   {"hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
                    "intermediate_size": 2048, "vocab_size": 50304, "rotary_pct": 0.25}),
    "pythia-160m": ("pythia", "GPTNeoXConfig", "causal",
                    {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                     "intermediate_size": 3072, "vocab_size": 50304, "rotary_pct": 0.25}),
    "smollm-135m": ("llama", "LlamaConfig", "causal",
                    {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                     "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
                     "tie_word_embeddings": True, "max_position_embeddings": 2048}),
    # added 2026-11-24 for the second untuned check (none of them in the CPU dataset then)
    "mobilebert": ("mobilebert", "MobileBertConfig", "encoder", {}),  # google/mobilebert-uncased
    "xlm-roberta-base": ("xlm-roberta", "XLMRobertaConfig", "encoder",  # a 250k-token vocabulary
                         {"vocab_size": 250002, "max_position_embeddings": 514, "type_vocab_size": 1}),
    "smollm-360m": ("llama", "LlamaConfig", "causal",
                    {"hidden_size": 960, "intermediate_size": 2560, "num_hidden_layers": 32,
                     "num_attention_heads": 15, "num_key_value_heads": 5, "vocab_size": 49152,
                     "tie_word_embeddings": True, "max_position_embeddings": 2048}),
    # added 2026-11-24 for the third untuned check (not measured before it)
    "qwen2-0.5b": ("qwen2", "Qwen2Config", "causal",  # Qwen/Qwen2-0.5B: a 152k-token vocabulary
                   {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                    "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                    "tie_word_embeddings": True, "max_position_embeddings": 2048}),
    "distilbert-multilingual": ("distilbert", "DistilBertConfig", "encoder",  # 119k-token vocabulary
                                {"vocab_size": 119547}),
    # added 2026-11-24 for the fourth untuned check (not measured before it)
    "deberta-v3-small": ("deberta", "DebertaV2Config", "encoder",  # microsoft/deberta-v3-small
                         {"hidden_size": 768, "num_hidden_layers": 6, "num_attention_heads": 12,
                          "intermediate_size": 3072, "vocab_size": 128100, "relative_attention": True,
                          "position_buckets": 256, "pos_att_type": ["p2c", "c2p"], "max_relative_positions": -1,
                          "position_biased_input": False, "norm_rel_ebd": "layer_norm", "share_att_key": True,
                          "type_vocab_size": 0}),
    "modernbert-base": ("modernbert", "ModernBertConfig", "encoder",  # answerdotai/ModernBERT-base
                        {"hidden_size": 768, "num_hidden_layers": 22, "num_attention_heads": 12,
                         "intermediate_size": 1152, "vocab_size": 50368}),
    "gemma3-270m": ("gemma", "Gemma3TextConfig", "causal",  # google/gemma-3-270m: a 262k-token vocabulary
                    {"hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18,
                     "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
                     "vocab_size": 262144, "sliding_window": 512, "tie_word_embeddings": True,
                     "max_position_embeddings": 32768}),
    # added 2026-11-24 for the fifth untuned check (not measured before it)
    "squeezebert": ("squeezebert", "SqueezeBertConfig", "encoder", {}),  # squeezebert/squeezebert-uncased
    "qwen3-0.6b": ("qwen3", "Qwen3Config", "causal",  # Qwen/Qwen3-0.6B
                   {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
                    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                    "vocab_size": 151936, "tie_word_embeddings": True, "max_position_embeddings": 40960}),
    "bloom-560m": ("bloom", "BloomConfig", "causal",  # bigscience/bloom-560m: ALiBi, a 251k-token vocabulary
                   {"hidden_size": 1024, "n_layer": 24, "n_head": 16, "vocab_size": 250880}),
    # added 2026-11-24 for the sixth untuned check (not measured before it)
    "opt-350m": ("opt", "OPTConfig", "causal",  # facebook/opt-350m: post-norm, 512-wide embeddings
                 {"hidden_size": 1024, "ffn_dim": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
                  "vocab_size": 50272, "word_embed_proj_dim": 512, "do_layer_norm_before": False}),
    "pythia-410m": ("pythia", "GPTNeoXConfig", "causal",  # EleutherAI/pythia-410m
                    {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                     "intermediate_size": 4096, "vocab_size": 50304, "rotary_pct": 0.25}),
    "mt5-small-encoder": ("t5", "T5Config", "t5-encoder",  # google/mt5-small: a 250k-token vocabulary
                          {"d_model": 512, "d_ff": 1024, "num_layers": 8, "num_heads": 6, "d_kv": 64,
                           "vocab_size": 250112, "feed_forward_proj": "gated-gelu"}),
    # added 2026-11-24 for the eighth untuned check (not measured before it)
    "mobilellm-125m": ("llama", "LlamaConfig", "causal",  # facebook/MobileLLM-125M: deep and thin, 30 layers
                       {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                        "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 32000,
                        "tie_word_embeddings": True, "max_position_embeddings": 2048}),
    "codegen-350m-mono": ("codegen", "CodeGenConfig", "causal",  # Salesforce/codegen-350M-mono
                          {"n_layer": 20, "n_embd": 1024, "n_head": 16, "rotary_dim": 32, "vocab_size": 51200,
                           "n_positions": 2048, "n_ctx": 2048}),
    "convbert-base": ("convbert", "ConvBertConfig", "encoder", {}),  # YituTech/conv-bert-base: span conv heads
    # added 2026-11-24 for the ninth untuned check (not measured before it)
    "gpt2-medium": ("gpt2", "GPT2Config", "causal", {"n_embd": 1024, "n_layer": 24, "n_head": 16}),
    "bert-large": ("bert", "BertConfig", "encoder",  # google-bert/bert-large-uncased
                   {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                    "intermediate_size": 4096}),
    # added 2026-11-24 for the tenth untuned check (not measured before it)
    "roberta-large": ("roberta", "RobertaConfig", "encoder",  # FacebookAI/roberta-large
                      {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                       "intermediate_size": 4096, "vocab_size": 50265, "max_position_embeddings": 514,
                       "type_vocab_size": 1}),
    "flan-t5-base-encoder": ("t5", "T5Config", "t5-encoder",  # google/flan-t5-base
                             {"d_model": 768, "d_ff": 2048, "num_layers": 12, "num_heads": 12, "d_kv": 64,
                              "vocab_size": 32128, "feed_forward_proj": "gated-gelu"}),
    # added 2026-11-27 for the CPU calibration check (reports/cpu-calibrate; in no dataset folder)
    "ernie-3.0-medium-zh": ("ernie", "ErnieConfig", "encoder",  # nghuyong/ernie-3.0-medium-zh
                            {"hidden_size": 768, "num_hidden_layers": 6, "num_attention_heads": 12,
                             "intermediate_size": 3072, "vocab_size": 40000, "max_position_embeddings": 2048,
                             "type_vocab_size": 4}),
    "deberta-v3-xsmall": ("deberta", "DebertaV2Config", "encoder",  # microsoft/deberta-v3-xsmall
                          {"hidden_size": 384, "num_hidden_layers": 12, "num_attention_heads": 6,
                           "intermediate_size": 1536, "vocab_size": 128100, "relative_attention": True,
                           "position_buckets": 256, "pos_att_type": ["p2c", "c2p"], "max_relative_positions": -1,
                           "position_biased_input": False, "norm_rel_ebd": "layer_norm", "share_att_key": True,
                           "type_vocab_size": 0}),
    "tinybert-4l-312d": ("bert", "BertConfig", "encoder",  # huawei-noah/TinyBERT_General_4L_312D
                         {"hidden_size": 312, "num_hidden_layers": 4, "num_attention_heads": 12,
                          "intermediate_size": 1200}),
    "cerebras-gpt-111m": ("gpt2", "GPT2Config", "causal",  # cerebras/Cerebras-GPT-111M
                          {"n_embd": 768, "n_layer": 10, "n_head": 12, "n_positions": 2048}),
}

#: Sequence lengths (tokens) a sampled architecture runs at.
SEQ_LENS = (16, 32, 64, 128)


class _TextModel(nn.Module):
    """Wraps a transformers model so ONNX sees one input and one output tensor."""

    def __init__(self, model: nn.Module, output: str) -> None:
        super().__init__()
        self.model = model
        self.output = output

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.output == "logits":
            # an all-ones attention mask, as a tokenizer gives for one unpadded
            # sequence; without one transformers traces a packed-sequence check
            # (torch.diff) that has no ONNX export
            out = self.model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
        else:
            out = self.model(input_ids=input_ids)
        return out[self.output]


def make_config(name: str):
    """The ``transformers`` config object of architecture ``name``."""
    transformers = import_transformers()
    _, cls, _, overrides = ARCHITECTURES[name]
    config = getattr(transformers, cls)(**overrides)
    config.use_cache = False
    config._attn_implementation = "eager"
    return config


def build(params: dict) -> nn.Module:
    """The wrapped model of ``params["model"]`` (random weights from transformers' own init)."""
    transformers = import_transformers()
    name = params["model"]
    kind = ARCHITECTURES[name][2]
    config = make_config(name)
    if kind == "causal":
        return _TextModel(transformers.AutoModelForCausalLM.from_config(config), "logits")
    if kind == "t5-encoder":
        return _TextModel(transformers.T5EncoderModel(config), "last_hidden_state")
    # an unused pooler is traced away by the exporter
    return _TextModel(transformers.AutoModel.from_config(config), "last_hidden_state")


def vocab_and_width(name: str) -> tuple[int, int]:
    """(vocabulary size, output width) of architecture ``name``."""
    config = make_config(name)
    kind = ARCHITECTURES[name][2]
    hidden = next(getattr(config, k) for k in ("hidden_size", "d_model", "n_embd", "dim")
                  if hasattr(config, k))
    return config.vocab_size, (config.vocab_size if kind == "causal" else hidden)


def io(params: dict, batch) -> tuple[list[TensorSpec], list[TensorSpec]]:
    vocab, width = _SHAPES[params["model"]]
    output = "logits" if ARCHITECTURES[params["model"]][2] == "causal" else "last_hidden_state"
    return ([TensorSpec("input_ids", (batch, params["seq"]), "int64", high=vocab)],
            [TensorSpec(output, (batch, params["seq"], width), "float32")])


class _Shapes(dict):
    """Vocabulary and output width per architecture, read from its config on first use."""

    def __missing__(self, name: str) -> tuple[int, int]:
        self[name] = vocab_and_width(name)
        return self[name]


_SHAPES = _Shapes()


def group(params: dict) -> str:
    """The architecture family of ``params`` (for family-held-out splits)."""
    return ARCHITECTURES[params["model"]][0]


def sample(rng: random.Random) -> dict:
    """A uniformly drawn architecture group, then a member and a sequence length."""
    groups = sorted({g for g, *_ in ARCHITECTURES.values()})
    g = pick(rng, groups)
    return {"model": pick(rng, sorted(n for n, a in ARCHITECTURES.items() if a[0] == g)),
            "seq": pick(rng, SEQ_LENS)}


FAMILY = Family(
    name="hf", doc=__doc__,
    params=(Param("model", "str", "bert-base", "published architecture name",
                  choices=tuple(sorted(ARCHITECTURES))),
            Param("seq", "int", 128, "sequence length in tokens", lo=1, hi=4096)),
    build=build, sample=sample, io=io, native_init=True, group=group,
)
