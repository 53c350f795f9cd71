"""Older ONNX files through the extractor (issue 13: every real model), each
checked as ``benchmarks.real_exports``' detection section is (every edge
tensor's extracted shape against onnxruntime's run on random input).

Sections (``--only`` picks some):

* ``onnx-zoo``: the classic ONNX Model Zoo architectures that onnx ships as
  backend test data (``onnx/backend/test/data/light``: AlexNet, DenseNet-121,
  Inception v1/v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512;
  Caffe2 exports, IR 3, opset 9, weights made by ConstantOfShape), at their
  fixed input shape.
* ``opsets``: torchvision models exported by torch's TorchScript exporter at
  opsets 9, 11 and 13 (random weights, dynamic batch; the opset older
  tutorials pin), extracted at batch 3; a model that opset cannot express is
  reported as the exporter's failure.

One JSON line per model on stdout (appended to ``--out``), a summary at the
end; exit 1 if a check fails.

Run: ``python -m benchmarks.classic_exports [--only onnx-zoo opsets] [--out F.jsonl]``
(~5 CPU-minutes, most of it exporting and running onnxruntime).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.real_checks import attempt, bound_check, emit, exported, failures  # noqa: E402
from training.zoo.real.torchvision_compat import importable_torchvision  # noqa: E402

#: onnx's copies of the classic ONNX Model Zoo architectures.
ONNX_ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
#: torchvision models per opset section (classifiers, then segmenters).
CLASSIFIERS = ("resnet18", "mobilenet_v3_small", "efficientnet_b0", "squeezenet1_0", "googlenet",
               "shufflenet_v2_x1_0", "regnet_x_400mf", "convnext_tiny", "mnasnet0_5", "vit_b_16",
               "swin_t", "maxvit_t", "alexnet")
SEGMENTERS = ("lraspp_mobilenet_v3_large", "fcn_resnet50", "deeplabv3_mobilenet_v3_large")
OPSETS = (9, 11, 13)


def onnx_zoo(tmp: Path) -> Iterator[dict]:
    for path in sorted(ONNX_ZOO.glob("*.onnx")):
        row: dict = {"section": "onnx-zoo", "model": path.stem}
        attempt(row, "check", partial(bound_check, path))
        yield row


def export_at_opset(name: str, opset: int, path: Path) -> None:
    """torchvision's ``name`` (random weights) by the TorchScript exporter at
    ``opset``, dynamic batch, weights kept (onnxruntime runs it)."""
    import torch

    importable_torchvision()
    import torchvision as tv  # type: ignore[import-untyped]

    seg = name in SEGMENTERS
    build = getattr(tv.models.segmentation if seg else tv.models, name)
    model = build(weights=None, **({"weights_backbone": None} if seg else {})).eval()
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 3, 224, 224),), buf, dynamo=False,  # type: ignore[arg-type]
                          opset_version=opset, input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    path.write_bytes(buf.getvalue())


def opsets(tmp: Path) -> Iterator[dict]:
    for opset in OPSETS:
        for name in CLASSIFIERS + SEGMENTERS:
            row: dict = {"section": "opsets", "model": name, "opset": opset}
            path = tmp / f"{name}-{opset}.onnx"

            def check(name: str = name, path: Path = path, opset: int = opset) -> dict:
                exported(partial(export_at_opset, name, opset, path))
                return bound_check(path, batch=3)
            attempt(row, "check", check)
            path.unlink(missing_ok=True)
            yield row


SECTIONS: dict[str, Callable[[Path], Iterator[dict]]] = {"onnx-zoo": onnx_zoo, "opsets": opsets}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    ap.add_argument("--out", type=Path, help="append each row to this JSON-lines file")
    args = ap.parse_args()
    rows, failed = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for section in args.only:
            for row in SECTIONS[section](Path(tmp)):
                rows += 1
                emit(row, args.out)
                failed += [f"{row['model']}: {f}" for f in failures(row)]
    print(json.dumps({"rows": rows, "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
