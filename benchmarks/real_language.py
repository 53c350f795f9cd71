"""The language-model sections of ``python -m benchmarks.real_exports``:
``hf`` (one transformers architecture per family, both torch exporters),
``ort-optimizer`` (onnxruntime's transformer fusions and float16
conversion), ``moe`` (mixture-of-experts LMs, checked against onnxruntime's
shapes) and ``genai`` (onnxruntime-genai's model builder). Each section is a
function of a temporary folder that yields one row per model.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import numpy as np
import onnx

from benchmarks.real_checks import attempt, bound_check, compare, exported, extracting, summary
from perfseer_rt import extract
from tests.contrib_models import run_shapes
from training.zoo.export import export_onnx
from training.zoo.real.torchvision_compat import import_transformers

#: (architecture, onnxruntime's model_type, heads, hidden) for the optimizer.
OPTIMIZED = (("bert-base", "bert", 12, 768), ("distilbert-base", "bert", 12, 768),
             ("roberta-base", "bert", 12, 768), ("gpt2", "gpt2", 12, 768),
             ("t5-small-encoder", "t5", 8, 512))



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
