"""Whole-model labels for the learned layer, from the public records
(``data/public-gpu``, :mod:`training.publicgpu`; measured by others) and the
structure-only rebuilds of their models.

* timm rows (RTX 3090 / 4090, PyTorch eager, AMP fp16, NCHW / NHWC): the
  rebuild named by the record's ``onnx`` in the export cache; attention is
  fused from PyTorch 2.0 on (timm's ``fused_attn``), materialised on 1.12 /
  1.13; training steps end with SGD + momentum.
* NeuSight rows (five transformers, eight NVIDIA GPUs, PyTorch 2.1 eager,
  fp32 with TF32 off, Hugging Face's eager attention): exported here with 1
  and 2 layers (:func:`training.gpuprior.neusight_e2e.export_model`); their
  training steps have no optimizer update.

A record whose rebuild is missing (not exported yet, or the export failed)
is skipped and counted.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median
from typing import Iterator

from perfseer_rt.gpu.spec_store import shipped_gpu_specs
from training.campaigns.gpu_window.label_fields import label_fields
from training.gpulearned.tables import Label
from training.gpuprior.neusight_labels import DATA as NEUSIGHT
from training.publicgpu.cache import onnx_file

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data" / "public-gpu"
#: Our own GPU records (measured by us with the GPU window; kept apart from ``DATA``).
OURS = REPO / "data" / "gpu"


#: Lambda's DLE BERT configs (``<name>.json`` under ``configs/``) and the head they train.
LAMBDA = DATA / "lambda"
QA_HEAD = ("AutoModelForQuestionAnswering", ("start_logits", "end_logits"))
#: Our architecture family (held-out folds) of each Lambda model: ResNet-50 is
#: timm's ``resnet`` family, the BERTs are NeuSight's BERT-large's.
LAMBDA_GROUPS = {"resnet50": "timm/resnet", "bert_base_squad": "neusight/bert_large",
                 "bert_large_squad": "neusight/bert_large"}


@dataclass(frozen=True)
class LayeredModel:
    """A transformer label's model, built from its Hugging Face config with 1
    and 2 layers (:func:`layer_exports`): its name, layer count, the folder
    whose ``configs/`` holds its config (empty: NeuSight's) and its head
    (None: the one NeuSight timed, ``neusight_e2e.head_of``)."""

    name: str
    layers: int
    folder: str = ""
    head: tuple[str, tuple[str, ...]] | None = None

    @property
    def configs(self) -> Path:
        """The folder whose ``configs/<name>.json`` is the model's config."""
        return Path(self.folder) if self.folder else NEUSIGHT


def sheet_of(gpu_name: str) -> str | None:
    """The shipped spec sheet whose product name is ``gpu_name`` (as
    nvidia-smi prints it), else None (the AMD GPUs)."""
    for key, (_, sheet) in shipped_gpu_specs().items():
        if sheet.name == gpu_name:
            return key
    return None


def records(root: Path = DATA) -> Iterator[dict]:
    """Every ok record under ``root`` (``*/**/records/*.jsonl``)."""
    for path in sorted(root.glob("**/records/*.jsonl")):
        with open(path) as fh:
            for line in fh:
                r = json.loads(line)
                if r.get("status") == "ok":
                    yield r


def _major(version: str | None) -> float:
    try:
        return float(".".join(str(version).split(".")[:2]))
    except ValueError:
        return 0.0


def timm_label(r: dict, cache: Path) -> Label | None:
    """The label of a timm record, None when its rebuild is not in ``cache``."""
    onnx = r.get("onnx")
    gpu = sheet_of(r["env"]["gpu_name"])
    if not onnx or gpu is None or not (cache / onnx).is_file():
        return None
    setup = r["setup"]
    mode = "train" if setup["mode"] == "train" else "inference"
    ms = r["metrics"]["step_ms" if mode == "train" else "latency_ms"]
    return Label(str(cache / onnx), int(r["batch"]), gpu, setup["precision"], setup["layout"], mode,
                 "sgd-momentum" if mode == "train" else None, _major(r["env"]["torch_version"]) >= 2.0,
                 float(ms), f"timm/{r['group']}", r.get("arch_kind") or "other", "timm")


def neusight_label(r: dict) -> tuple[Label, LayeredModel] | None:
    """The label of a NeuSight record (its ``onnx`` is filled per layer count
    by the caller), None for a GPU without a spec sheet (AMD)."""
    gpu = sheet_of(r["env"]["gpu_name"])
    if gpu is None:
        return None
    mode = "train" if r["setup"]["mode"] == "train" else "inference"
    params = r["config"]["params"]
    ms = r["metrics"]["step_ms" if mode == "train" else "latency_ms"]
    model = LayeredModel(params["model"], int(r["published"]["num_layer"]))
    return (Label("", int(r["batch"]), gpu, "fp32-strict", "nchw", mode, None, False, float(ms),
                  f"neusight/{params['model']}", "transformer", "neusight",
                  dims=(("seq", int(params["seq"])),)), model)


def lambda_labels(recs: list[dict], cache: Path, configs: Path = LAMBDA
                  ) -> tuple[list[Label], list[tuple[Label, LayeredModel]], Counter]:
    """Lambda's records as labels: one per GPU, task, batch and NGC container
    build, the median step of its runs (a GPU many systems ran, such as the
    H100 SXM, is one label per container, not a hundred). ResNet-50 is the
    rebuild of timm's ``resnet50`` at 224 in ``cache`` (DLE's ResNet-50 v1.5
    is the same network); the BERTs are built from their configs
    (``configs/configs/<model>.json``) with the question-answering head.
    Attention is materialised (DLE's own BERT)."""
    runs: dict[tuple, list[float]] = {}
    first: dict[tuple, dict] = {}
    skipped: Counter = Counter()
    for r in recs:
        gpu = sheet_of(r["env"]["gpu_name"])
        if gpu is None:
            skipped["lambda: no spec sheet"] += 1
            continue
        key = (gpu, r["setup"]["precision"], r["config"]["params"]["model"], int(r["batch"]),
               str(r["published"].get("container_build")))
        runs.setdefault(key, []).append(float(r["metrics"]["step_ms"]))
        first.setdefault(key, r)
    plain: list[Label] = []
    layered: list[tuple[Label, LayeredModel]] = []
    for key, ms in sorted(runs.items()):
        gpu, precision, model, batch, _ = key
        opt = first[key]["published"]["optimizer"]
        if model == "resnet50":
            path = onnx_file(cache, "resnet50", 224)
            if path is None:
                skipped["lambda: no rebuild of resnet50@224 yet"] += len(ms)
                continue
            plain.append(Label(str(path), batch, gpu, precision, "nchw", "train", opt, False, median(ms),
                               LAMBDA_GROUPS[model], "cnn", "lambda"))
        else:
            layers = json.loads((configs / "configs" / f"{model}.json").read_text())["num_hidden_layers"]
            layered.append((Label("", batch, gpu, precision, "nchw", "train", opt, False, median(ms),
                                  LAMBDA_GROUPS[model], "transformer", "lambda", dims=(("seq", 384),)),
                            LayeredModel(model, int(layers), str(configs), QA_HEAD)))
    return plain, layered, skipped


def load(root: Path, cache: Path) -> tuple[list[Label], list[tuple[Label, LayeredModel]], Counter]:
    """(labels of rebuilt models, labels of layered transformers with their
    models, counts of what was skipped and why): timm, NeuSight and Lambda."""
    timm: list[Label] = []
    neusight: list[tuple[Label, LayeredModel]] = []
    skipped: Counter = Counter()
    lam: list[dict] = []
    for r in records(root):
        if r["family"] == "lambda":
            lam.append(r)
            continue
        if r["family"] == "timm":
            lab = timm_label(r, cache)
            if lab is None:
                skipped["timm: no rebuild yet"] += 1
            else:
                timm.append(lab)
        elif r["family"] == "neusight":
            got = neusight_label(r)
            if got is None:
                skipped["neusight: no spec sheet (AMD)"] += 1
            else:
                neusight.append(got)
    plain, layered, skipped_lambda = lambda_labels(lam, cache, root / "lambda")
    skipped.update(skipped_lambda)
    return timm + plain, neusight + layered, skipped


def our_labels(root: Path, cache: Path) -> tuple[list[Label], Counter]:
    """Labels of our own GPU records under ``root`` (``data/gpu``: measured
    by us with :mod:`training.campaigns.gpu_window`; source ``"ours"``), each
    whose structure-only rebuild is in ``cache``; counts of what was skipped."""
    out: list[Label] = []
    skipped: Counter = Counter()
    if not root.is_dir():
        return out, skipped
    for r in records(root):
        try:
            fields = label_fields(r)
        except ValueError:
            skipped["ours: not a measurement of ours"] += 1
            continue
        path = cache / fields.pop("onnx")
        if not path.is_file():
            skipped["ours: no rebuild yet"] += 1
            continue
        out.append(Label(str(path), **fields))
    return out, skipped


def layer_exports(model: LayeredModel, mode: str, cache: Path) -> dict[int, str]:
    """Structure-only exports of ``model`` with 1 and 2 layers, for ``mode``
    (NeuSight's BERT has another head in training), made once into ``cache``."""
    # lazy: torch + transformers, needed by this step only
    from training.gpuprior.neusight_e2e import export_model, head_of

    configs = model.configs
    model_type = json.loads((configs / "configs" / f"{model.name}.json").read_text())["model_type"]
    # the causal LMs are the same model in both modes
    head = model.head[0] if model.head else head_of(model_type, mode)[0]
    out = {}
    folder = cache / "neusight"
    folder.mkdir(parents=True, exist_ok=True)
    for k in (1, 2):
        path = folder / f"{model.name}-{head}-{k}.onnx"
        if not path.is_file():
            export_model(model.name, k, path, folder=configs, mode=mode, head=model.head)
        out[k] = str(path)
    return out


def with_onnx(label: Label, onnx: str) -> Label:
    return replace(label, onnx=onnx)
