"""Draw the models of a fresh untuned user check, and register them before
anything is measured.

A check is only worth something on models the predictor has never seen and
that nobody picked by looking at its errors. This draws ``--timm`` models
with ``random.Random(--seed)`` from the timm scan list
(``training/zoo/real/timm_models.json``, sorted by name) and takes the zoo's
HF text models, less every model that

* any dataset folder holds (``--data``: ``records/*.jsonl``, by model name,
  whatever its resolution or sequence length),
* the large-batch extension's ``FixedPlan`` (:data:`EXTENSION_PLAN`) can
  still measure into the training data (its architectures are drawn by
  seed, so the ones it would draw next are excluded too),
* an earlier check measured (``--checks``: ``user_check*.json`` and plans).

The fixed plan draws every HF model of the zoo sooner or later, so HF
models are excluded by the data and the checks only: a model added to the
zoo for a check is new to both, and resuming the extension campaign must
leave the checks' models out (docs/development.md).

It writes the plan (``--out``, JSON: the draw, the exclusions, the specs and
the command that measures them) and prints the specs. No model is exported
or measured here.

    python -m training.seernet.draw_check --seed 20261127 --timm 12 \\
        --out reports/cpu-amd-epyc-1t/user_check_holdout5_plan.json
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import random
from pathlib import Path
from typing import Any, Iterable, Sequence

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.campaign.plan import FixedPlan
from training.seernet.recalibrate import model_name, trained_models
from training.zoo.real import hf_text

TIMM_LIST = Path(__file__).resolve().parents[1] / "zoo" / "real" / "timm_models.json"
#: The large-batch extension's plan (docs/development.md, "The CPU predictor").
EXTENSION_PLAN: dict[str, Any] = {"seed": 9, "count": 400, "families": ["timm", "hf"],
                                  "batches": [16, 32, 64], "batches_per_arch": 2}


def dataset_models(folders: Sequence[str | Path]) -> set[str]:
    """Every published model (``family:model=NAME``) the records of these
    dataset folders hold."""
    return {m for m in trained_models([Path(f) for f in folders]) if ":model=" in m}


def plan_models(plan: FixedPlan) -> set[str]:
    """Every published model (``family:model=NAME``) a fixed plan would measure."""
    return {m for m in (model_name(item.spec) for item in plan.items() if item.spec) if ":model=" in m}


def check_models(files: Iterable[str | Path]) -> set[str]:
    """Every model (``family:model=NAME``) in user-check results and plans."""
    seen: set[str] = set()
    for path in files:
        doc = json.loads(Path(path).read_text())
        seen.update(model_name(s) for s in [r["spec"] for r in doc.get("rows", [])] + list(doc.get("specs", [])))
    return seen


def draw(seed: int, n_timm: int, excluded: set[str], hf_excluded: set[str]) -> tuple[list[str], list[str]]:
    """``(timm specs, hf specs)``: ``n_timm`` timm models drawn by ``seed``
    from the scan list less ``excluded`` (at their scanned resolution), and
    every zoo HF model not in ``hf_excluded`` (sequence length 64); models
    are named as :func:`training.seernet.recalibrate.model_name` names them."""
    res = {e["name"]: e["res"] for e in json.loads(TIMM_LIST.read_text())["models"]}
    pool = [n for n in sorted(res) if f"timm:model={n}" not in excluded]
    timm = [f"timm:model={n},res={res[n]}"
            for n in random.Random(seed).sample(pool, min(n_timm, len(pool)))]
    hf = [f"hf:model={n},seq=64" for n in sorted(hf_text.ARCHITECTURES) if f"hf:model={n}" not in hf_excluded]
    return timm, hf


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m training.seernet.draw_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--timm", type=int, default=12, help="timm models to draw")
    ap.add_argument("--data", nargs="*", default=sorted(glob.glob("data/cpu-*/*")))
    ap.add_argument("--checks", nargs="*",
                    default=sorted(glob.glob("reports/cpu-amd-epyc-1t/user_check*.json")))
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 4, 16])
    args = ap.parse_args(argv)
    if args.out.exists():
        raise SystemExit(f"error: {args.out} exists: a registered plan is never redrawn")
    in_data, in_checks = dataset_models(args.data), check_models(args.checks)
    in_plan = plan_models(FixedPlan(**EXTENSION_PLAN))
    excluded = in_data | in_checks | in_plan
    timm, hf = draw(args.seed, args.timm, excluded, in_data | in_checks)
    doc: dict[str, Any] = {
        "purpose": "untuned hold-out check of the shipped CPU predictor: models fixed here, before "
                   "any of them is measured",
        "date": datetime.date.today().isoformat(),
        "draw": f"python -m training.seernet.draw_check --seed {args.seed} --timm {args.timm}: timm "
                f"drawn with random.Random({args.seed}).sample from the scan list sorted by name; "
                "hf: every zoo HF text model in no data folder and no earlier check; "
                "excluded: models of the data folders, of "
                f"the large-batch fixed plan {EXTENSION_PLAN} and of the earlier checks",
        "data": list(args.data), "checks": list(args.checks),
        "excluded_models": {"data": len(in_data), "fixed_plan": len(in_plan),
                            "checks": len(in_checks), "all": len(excluded)},
        "specs": timm + hf, "batches": list(args.batches),
        "command": f"training/dataset/quiet_core.sh python -m training.seernet.user_check --out "
                   f"{str(args.out).replace('_plan', '')} --device cpu-amd-epyc-1t --core 1 "
                   f"--batches {' '.join(map(str, args.batches))} --specs <specs>",
    }
    atomic_write_bytes(args.out, (json.dumps(doc, indent=1) + "\n").encode())
    print("\n".join(timm + hf))


if __name__ == "__main__":
    main()
