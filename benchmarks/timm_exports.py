"""A random sample of timm's models through torch's default (dynamo)
exporter and the extractor, each checked as ``benchmarks.real_exports``'
detection section is (every edge tensor's extracted shape against
onnxruntime's run on random input, at batch 3 of a dynamic batch axis).

The sample is drawn from ``timm.list_models()`` with ``--seed`` (random
weights, the model's own input size capped at 224); a model the exporter
cannot write is reported as the toolchain's failure, and one whose weights
are over protobuf's 2 GB (saved as external data) is extracted without the
onnxruntime check (the check serialises the whole model).

Run: ``python -m benchmarks.timm_exports [--seed 22] [--models 30] [--out F.jsonl]``
(~15 CPU-minutes for 30 models, most of it exporting).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import warnings
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.real_checks import bound_check, checked_rows, exported, timed_extract  # noqa: E402
from training.zoo.real.torchvision_compat import import_timm  # noqa: E402

#: Weights above this (bytes) leave protobuf's limit for the onnxruntime check.
CHECK_LIMIT = 2**31 - 2**26


def export_dynamo(name: str, path: Path) -> None:
    """timm's ``name`` (random weights) by torch's dynamo exporter, dynamic batch."""
    import torch

    timm = import_timm()
    model = timm.create_model(name, pretrained=False).eval()
    res = min(model.pretrained_cfg.get("input_size", (3, 224, 224))[1], 224)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, (torch.randn(2, 3, res, res),), dynamo=True, input_names=["x"],
                                    verbose=False,
                                    dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=1024)},))
        if program is None:
            raise RuntimeError("the dynamo exporter returned no program")
        program.save(str(path))


def check(name: str, path: Path) -> dict:
    exported(lambda: export_dynamo(name, path))
    weights = sum(f.stat().st_size for f in path.parent.glob(f"{path.name}*"))
    if weights > CHECK_LIMIT:
        return {**timed_extract(path, batch=3), "onnxruntime_check": "skipped: over 2 GB"}
    return bound_check(path, batch=3)


def check_in_temp(name: str) -> dict:
    """:func:`check` with the export in a temporary folder."""
    with tempfile.TemporaryDirectory() as tmp:
        return check(name, Path(tmp) / f"{name}.onnx")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--models", type=int, default=30)
    ap.add_argument("--out", type=Path, help="append each row to this JSON-lines file")
    args = ap.parse_args()
    names = random.Random(args.seed).sample(sorted(import_timm().list_models()), args.models)
    return checked_rows((({"section": "timm-dynamo", "seed": args.seed, "model": name},
                          partial(check_in_temp, name)) for name in names), args.out)


if __name__ == "__main__":
    sys.exit(main())
