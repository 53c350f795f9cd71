"""Export small transformers models with optimum-onnx (``optimum-cli export
onnx``), for ``benchmarks.real_exports``' ``optimum`` section. Runs under an
interpreter that has ``optimum-onnx`` (a venv made with
``--system-site-packages`` over this project's: optimum pins its own
transformers; on 2026-11-25: ``V/bin/pip install optimum-onnx``, which brought
optimum 2.1.0 and transformers 4.57.6): ``python benchmarks/optimum_export.py
OUT_DIR [NAME ...]``.
Each model is built from a small config with random weights, saved, and
exported for its task (decoders and seq2seq models with their KV cache:
``decoder_model_merged.onnx`` among them); its files go to ``OUT_DIR/NAME/``.
One line per model on stdout: ``ok NAME`` or ``failed NAME: error``.
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: name -> (transformers model class, config class, config, optimum task).
MODELS: dict[str, tuple[str, str, dict, str]] = {
    "gpt2": ("GPT2LMHeadModel", "GPT2Config",
             {"n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 500, "n_positions": 128},
             "text-generation-with-past"),
    "llama": ("LlamaForCausalLM", "LlamaConfig",
              {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 500,
               "max_position_embeddings": 128}, "text-generation-with-past"),
    "t5": ("T5ForConditionalGeneration", "T5Config",
           {"d_model": 64, "d_ff": 128, "num_layers": 2, "num_heads": 2, "vocab_size": 500,
            "d_kv": 32}, "text2text-generation-with-past"),
    "whisper": ("WhisperForConditionalGeneration", "WhisperConfig",
                {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2,
                 "encoder_attention_heads": 2, "decoder_attention_heads": 2,
                 "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "vocab_size": 500,
                 "max_source_positions": 1500, "max_target_positions": 64, "pad_token_id": 0,
                 "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1},
                "automatic-speech-recognition-with-past"),
    "bert": ("BertForSequenceClassification", "BertConfig",
             {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "intermediate_size": 128, "vocab_size": 500}, "text-classification"),
    "vit": ("ViTForImageClassification", "ViTConfig",
            {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
             "intermediate_size": 128, "image_size": 64, "patch_size": 16},
            "image-classification"),
}


def main() -> int:
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(ROOT))
    # torchvision's CUDA wheel under a CPU torch: declared before transformers imports it
    from training.zoo.real.torchvision_compat import export_kernels

    export_kernels()
    import transformers
    from export_lines import report
    from optimum.exporters.onnx import main_export

    out, names = Path(sys.argv[1]), sys.argv[2:]

    def export(name: str) -> None:
        cls, config_cls, config, task = MODELS[name]
        model = getattr(transformers, cls)(getattr(transformers, config_cls)(**config))
        with tempfile.TemporaryDirectory() as src:
            model.save_pretrained(src)
            main_export(src, output=out / name, task=task)

    return report(names or list(MODELS), export)


if __name__ == "__main__":
    sys.exit(main())
