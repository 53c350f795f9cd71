"""Export Ultralytics YOLO models to ONNX (for ``benchmarks.real_exports``'
``ultralytics`` section). Runs under an interpreter that has ``ultralytics``
(a venv made with ``--system-site-packages`` over this project's, so that it
shares torch and onnx; on 2026-11-25: ``python -m venv --system-site-packages V
&& V/bin/pip install ultralytics==8.4.190 onnxslim``):
``python benchmarks/ultralytics_export.py OUT_DIR [NAME ...]``. Each model is
built from its YAML (random weights: nothing is downloaded) and exported as
``yolo export format=onnx`` does, with the options in its name; one line per model on stdout: ``ok NAME`` or
``failed NAME: error``.
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: name -> (model YAML, export options).
MODELS: dict[str, tuple[str, dict]] = {
    "yolov8n": ("yolov8n.yaml", {"dynamic": True}),
    "yolov8n-simplified": ("yolov8n.yaml", {"dynamic": True, "simplify": True}),
    "yolov8n-nms": ("yolov8n.yaml", {"dynamic": True, "nms": True}),
    "yolov10n": ("yolov10n.yaml", {"dynamic": True, "simplify": True}),
    "yolo11n": ("yolo11n.yaml", {"dynamic": True, "simplify": True}),
    "yolo11n-static": ("yolo11n.yaml", {"simplify": True}),
    "yolo11n-seg": ("yolo11n-seg.yaml", {"dynamic": True, "simplify": True}),
    "yolo11n-pose": ("yolo11n-pose.yaml", {"dynamic": True, "simplify": True}),
    "yolo11n-obb": ("yolo11n-obb.yaml", {"dynamic": True, "simplify": True}),
    "yolo11n-cls": ("yolo11n-cls.yaml", {"dynamic": True, "simplify": True}),
    "yolo26n": ("yolo26n.yaml", {"dynamic": True, "simplify": True}),
}


def main() -> int:
    os.environ["YOLO_OFFLINE"] = "1"
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(ROOT))
    # torchvision's CUDA wheel under a CPU torch: its nms must be declared
    # before ultralytics imports it (the nms=True export calls it)
    from training.zoo.real.torchvision_compat import export_kernels

    export_kernels()
    from export_lines import report
    from ultralytics import YOLO

    out, names = Path(sys.argv[1]).resolve(), sys.argv[2:]
    scratch = out / "exporting"  # the exporter writes NAME.onnx where it runs
    scratch.mkdir(exist_ok=True)
    os.chdir(scratch)
    def export(name: str) -> None:
        yaml, options = MODELS[name]
        shutil.move(YOLO(yaml).export(format="onnx", **options), out / f"{name}.onnx")

    return report(names or list(MODELS), export)


if __name__ == "__main__":
    sys.exit(main())
