"""Write ``timm_models.json``: the timm architectures the ``timm`` family samples.

``python -m training.zoo.real.timm_scan`` builds every model of the installed
timm on the ``meta`` device (no memory, no initialisation) to count its
parameters and read its default input; it keeps models with at most
:data:`~training.zoo.real.timm_vision.MAX_PARAMS` parameters and a default
input of at most 256 pixels, and drops timm's own test models (``test_*``).
Takes a few minutes on one core.
"""

from __future__ import annotations

import argparse
import json
import warnings

import torch
from tqdm import tqdm

from training.zoo.real.timm_vision import _MODELS_FILE, MAX_PARAMS
from training.zoo.real.torchvision_compat import import_timm

#: Largest default input side (pixels) of a candidate.
MAX_RES = 256


def scan() -> list[dict]:
    """Every timm model's name, module, parameter count and default input (or its error)."""
    timm = import_timm()
    out = []
    for name in tqdm(timm.list_models(), unit="model"):
        try:
            with warnings.catch_warnings(), torch.device("meta"):
                warnings.simplefilter("ignore")
                model = timm.create_model(name)
        except Exception as exc:  # noqa: BLE001 - a model that cannot be built is left out
            out.append({"name": name, "error": f"{type(exc).__name__}: {str(exc)[:100]}"})
            continue
        cfg = model.pretrained_cfg or {}
        # group: the timm module that registers the model (mobilevit, repvgg, ...),
        # not the class's module (both of those build a ByobNet)
        group = timm.models.model_entrypoint(name).__module__.rsplit(".", 1)[-1]
        out.append({"name": name, "group": group,
                    "params": int(sum(p.numel() for p in model.parameters())),
                    "res": int(cfg.get("input_size", (3, 224, 224))[-1]),
                    "fixed": bool(cfg.get("fixed_input_size", False))})
    return out


def candidates(scanned: list[dict]) -> list[dict]:
    """The scanned models the family samples from (see the module docstring)."""
    return [m for m in scanned if "error" not in m and not m["name"].startswith("test_")
            and m["params"] <= MAX_PARAMS and m["res"] <= MAX_RES]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.zoo.real.timm_scan", description=__doc__)
    ap.add_argument("--scan", help="read a previous scan (JSON list) instead of scanning")
    args = ap.parse_args(argv)
    timm = import_timm()
    scanned = json.loads(open(args.scan).read()) if args.scan else scan()
    for m in scanned:  # a saved scan may predate the group rule
        if "error" not in m:
            m["group"] = timm.models.model_entrypoint(m["name"]).__module__.rsplit(".", 1)[-1]
    keep = candidates(scanned)
    doc = {"timm_version": timm.__version__, "max_params": MAX_PARAMS, "max_res": MAX_RES,
           "scanned": len(scanned), "models": keep}
    _MODELS_FILE.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(keep)} of {len(scanned)} timm models in {_MODELS_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
