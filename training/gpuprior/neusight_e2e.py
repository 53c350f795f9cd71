"""NeuSight's whole-model GPU latencies: the labels and the models.

NeuSight's artifact (``sitar-lab/NeuSight``, MIT licence) publishes, beside the
per-operator rows the kernel prior is fitted on, the end-to-end latency of
five dense transformers (BERT-large, GPT-2 large, GPT-3 XL, GPT-3 2.7B,
OPT-1.3B built from the Hugging Face configs in
``scripts/asplos/data/DLmodel_configs``) on twelve GPUs: PyTorch 2.1 eager,
fp32 (TF32 off), random weights, ``input_ids`` of ones, eager (materialised)
attention, the mean of the fastest 5 of 25 timed forward passes (CUDA events
around ``model(input_ids)``); training runs time forward + backward (no
optimizer step). None of these numbers were measured by us.

``labels --repo GITDIR``: read every single-GPU inference and training label
(``scripts/asplos/label/<GPU>/<model>-<mode>-<seq>-<batch>.json``, fused and
multi-GPU runs left out) and the model configs from a clone of the artifact
(``git show``, no work tree needed) into ``data/neusight-e2e/``, each row
naming its source file and commit.

:func:`export_model` builds a config structure-only with 1, 2 or all its
layers: the learned GPU layer's labels (``training/gpulearned``) use the
1- and 2-layer exports and count the repeated layer's kernels ``L - 1``
times, so no billions of weights are built.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import onnx

from training.gpuprior.neusight_labels import DATA, collect_labels, write_labels


#: The model class NeuSight's ``get_model`` builds from each config (their
#: ``neusight/Tracing/trace.py``): BERT is timed as a sequence classifier in
#: inference (no LM head) and as BertForPreTraining in training; the GPT-2 and
#: OPT configs as causal LMs in both.
def head_of(model_type: str, mode: str) -> tuple[str, str]:
    """(transformers auto class, name of the output that carries the logits)."""
    if model_type == "bert":
        return (("AutoModelForSequenceClassification", "logits") if mode == "inference"
                else ("AutoModelForPreTraining", "prediction_logits"))
    return "AutoModelForCausalLM", "logits"


def export_model(name: str, layers: int | None, path: Path, folder: Path = DATA,
                 mode: str = "inference", head: tuple[str, tuple[str, ...]] | None = None) -> Path:
    """``name``'s config (``folder/configs/<name>.json``) with ``layers``
    layers (None: as configured), built as NeuSight built it for ``mode``
    (:func:`head_of`) or with ``head`` (a transformers auto class and the
    outputs to return, stacked on a last axis when there are several), and
    exported structure-only to ``path`` with dims ``batch`` and ``seq``."""
    # deliberately lazy: torch and transformers are needed by this step only
    import torch

    from training.zoo.export import strip_weights
    from training.zoo.real.torchvision_compat import import_transformers

    transformers = import_transformers()

    cfg = json.loads((folder / "configs" / f"{name}.json").read_text())
    if layers is not None:
        cfg["n_layer" if "n_layer" in cfg else "num_hidden_layers"] = layers
    model_type = cfg.pop("model_type")
    cfg.pop("architectures", None)
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    config.use_cache = False
    if head is None:
        auto, output = head_of(model_type, mode)
        head = (auto, (output,))
    auto, outputs = head
    model = getattr(transformers, auto).from_config(config, attn_implementation="eager").eval()

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            # an all-ones mask, as HF builds when none is given; without one transformers
            # traces a packed-sequence check (torch.diff) that has no ONNX export
            out = self.model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
            return out[outputs[0]] if len(outputs) == 1 else torch.stack([out[o] for o in outputs], -1)

    ids = torch.ones((2, 16), dtype=torch.int64)
    with torch.no_grad():  # an output per token has a seq axis to name
        out = Logits()(ids)
    per_token = out.dim() >= 2 and out.shape[1] == ids.shape[1]
    with torch.no_grad(), tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        # to a file: torch writes the weights of a model over 2 GiB as external data beside it
        torch.onnx.export(Logits(), (ids,), str(Path(tmp) / "model.onnx"), dynamo=False,
                          opset_version=18, do_constant_folding=True, input_names=["input_ids"],
                          output_names=["logits"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                        "logits": {0: "batch", 1: "seq"} if per_token else {0: "batch"}})
        proto = onnx.load(str(Path(tmp) / "model.onnx"))
    strip_weights(proto, path.name + ".data")
    onnx.save_model(proto, str(path))
    return path


def layers_of(name: str, folder: Path = DATA) -> int:
    cfg = json.loads((folder / "configs" / f"{name}.json").read_text())
    return int(cfg.get("n_layer", cfg.get("num_hidden_layers")))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.gpuprior.neusight_e2e", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    lab = sub.add_parser("labels", help="copy the labels and configs from a clone of the artifact")
    lab.add_argument("--repo", type=Path, required=True, help="git directory of sitar-lab/NeuSight")
    args = ap.parse_args(argv)
    rows, configs = collect_labels(args.repo)
    write_labels(rows, configs)
    print(f"{len(rows)} labels -> {DATA / 'labels.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
