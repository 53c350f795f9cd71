"""Export the reference models that ``perfseer-rt calibrate`` profiles.

``python -m training.byod reference-set`` writes structure-only ONNX files
(dynamic batch, weights stripped: :func:`training.zoo.export.export_onnx`)
and ``index.json`` into ``perfseer_rt/calibrate/reference/``. Calibration
fills the weights with random values at profile time
(:func:`perfseer_rt.calibrate.reference.materialize`).

The set spans the families of the shipped CPU predictor's training data. The
first 16 (2026-11-24) are small zoo models at batch 1 (a few at batch 4),
about 1..40 ms on one core; :data:`REAL_SIZE` adds eight published
architectures the predictor was trained on, at the sizes users run (about
10..130 ms on one core of an AMD EPYC): on an Intel Xeon (family 6 model 167) the
small ones ran 0.56x their AMD prediction and real timm models 0.66x, so a
correction fitted on small models alone was 15 % low on real ones
(``reports/cpu-intel-xeon/``). :data:`KINDS_SET` adds models that
separate the kinds of work a per-kind calibration corrects (attention at
512 tokens, depthwise and element-wise work at batch 16, a dense ResNet-50).
Profiling all of them, two rounds, takes about a minute on one core.

Tensor and node names are shortened (:func:`short_names`): the exporter's
names (``/model/transformer/h.0/attn/MatMul_output_0``) were 1.2 of the
set's 2.1 MB; the PerfGraphs extracted from the files are bit for bit those of
the long-named files, and onnxruntime's timings do not read names.
``shorten_all()`` applies it to files exported before.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.zoo import parse_spec
from training.zoo.export import export_onnx

OUT = Path(__file__).resolve().parents[2] / "perfseer_rt" / "calibrate" / "reference"

#: (name, zoo spec, batch). Ordered smallest first: a quick calibration takes a prefix.
REFERENCES: tuple[tuple[str, str, int], ...] = (
    ("nb201", "nb201", 1),
    ("mobilenetv3-small", "mobilenetv3:variant=small,res=160", 1),
    ("bert-2x128", "bert:depth=2,dim=128,heads=2,seq=64,vocab=1000", 1),
    ("resnet18-w05", "resnet:depth=18,width=0.5,res=128", 1),
    ("vgg11-w025", "vgg:depth=11,width=0.25,res=128", 1),
    ("googlenet-w05", "googlenet:width=0.5,res=128", 1),
    ("mobilenetv2-160", "mobilenetv2:width=1.0,res=160", 1),
    ("vit-4x192", "vit:depth=4,dim=192,heads=3,patch=16,res=224", 1),
    ("gpt-2x256", "gpt:depth=2,dim=256,heads=4,seq=128,vocab=1000", 1),
    ("efficientnet-b0-160", "efficientnet:variant=b0,res=160", 1),
    ("mobilenetv3-large-b4", "mobilenetv3:variant=large,res=128", 4),
    ("densenet121-w05", "densenet:depth=121,width=0.5,res=128", 1),
    ("resnet50-w05", "resnet:depth=50,width=0.5,res=160", 1),
    ("vit-6x256-b4", "vit:depth=6,dim=256,heads=4,patch=16,res=128", 4),
    ("resnet18-224", "resnet:depth=18,res=224", 1),
    ("mobilenetv2-224-b4", "mobilenetv2:width=1.0,res=224", 4),
)
#: Published architectures at real-model sizes, appended (so ``--models 16`` is the set above).
REAL_SIZE: tuple[tuple[str, str, int], ...] = (
    ("efficientnet_b0-224", "timm:model=efficientnet_b0,res=224", 1),
    ("deit_tiny-224", "timm:model=deit_tiny_patch16_224,res=224", 1),
    ("distilbert-seq32", "hf:model=distilbert-base,seq=32", 1),
    ("gpt2-seq16", "hf:model=gpt2,seq=16", 1),
    ("resnext50d-224", "timm:model=resnext50d_32x4d,res=224", 1),
    ("convnext_tiny-224", "timm:model=convnext_tiny,res=224", 1),
    ("vit_small-224", "timm:model=vit_small_patch16_224,res=224", 1),
    ("mobilenetv3_large-224-b16", "timm:model=mobilenetv3_large_100,res=224", 16),
)

#: Models that separate the kinds of work a per-kind calibration corrects
#: (:mod:`perfseer_rt.calibrate.kinds`): attention at long sequences, depthwise
#: and element-wise work at larger batches, dense products alone; appended last.
KINDS_SET: tuple[tuple[str, str, int], ...] = (
    ("bert-2x128-seq512", "bert:depth=2,dim=128,heads=2,seq=512,vocab=1000", 1),
    ("vit-4x192-p8", "vit:depth=4,dim=192,heads=3,patch=8,res=224", 1),
    ("mobilenetv3-small-224-b16", "mobilenetv3:variant=small,res=224", 16),
    ("resnet50-224", "resnet:depth=50,res=224", 1),
    ("nb201-b16", "nb201", 16),
)


_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base36(i: int) -> str:
    out = ""
    while True:
        i, r = divmod(i, 36)
        out = _DIGITS[r] + out
        if i == 0:
            return out


def short_names(proto: onnx.ModelProto) -> None:
    """Rename, in place, every tensor but the graph's inputs and outputs to
    ``t<base 36 index>`` (first use first) and every node to ``n<index>``.

    Raises:
        ValueError: the graph has subgraphs (their outer-scope names are not renamed).
    """
    graph = proto.graph
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for n in graph.node for a in n.attribute):
        raise ValueError(f"{graph.name}: a node with a subgraph; names are not shortened")
    keep = {v.name for v in [*graph.input, *graph.output]}
    names: dict[str, str] = {}

    def short(name: str) -> str:
        if not name or name in keep:
            return name
        return names.setdefault(name, f"t{_base36(len(names))}")

    for t in graph.initializer:
        t.name = short(t.name)
    for v in graph.value_info:
        v.name = short(v.name)
    for i, node in enumerate(graph.node):
        node.input[:] = [short(x) for x in node.input]
        node.output[:] = [short(x) for x in node.output]
        node.name = f"n{_base36(i)}"


def shorten_file(path: Path) -> None:
    """:func:`short_names` on the structure-only ONNX file ``path``, rewritten in place."""
    proto = onnx.load(str(path), load_external_data=False)
    short_names(proto)
    atomic_write_bytes(path, proto.SerializeToString())


def shorten_all(out: Path = OUT) -> None:
    """:func:`shorten_file` on every ``*.onnx`` of ``out`` (the set exported before)."""
    for path in sorted(out.glob("*.onnx")):
        shorten_file(path)


def export_all(out: Path = OUT) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    index = []
    files: dict[str, str] = {}  # one file per spec: the exports have a dynamic batch
    for name, spec, batch in REFERENCES + REAL_SIZE + KINDS_SET:
        cfg = parse_spec(spec)
        if spec not in files:
            path = export_onnx(cfg, out / f"{name}.onnx", batch=None, structure_only=True)
            shorten_file(path)
            files[spec] = path.name
            print(f"{name}: {path.stat().st_size / 1024:.1f} KiB")
        index.append({"name": name, "file": files[spec], "spec": spec, "batch": batch, "arch_id": cfg.arch_id})
    (out / "index.json").write_text(json.dumps({"models": index}, indent=1) + "\n")
    return out


if __name__ == "__main__":
    export_all()
