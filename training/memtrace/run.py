"""Trace the cases of :mod:`training.memtrace.models` and append one JSON
line per run to ``data/memtrace/records.jsonl`` (resumes: runs already in
the file are skipped).

    nice -n 10 python -m training.memtrace.run [--cases resnet18,bert-L4-H256] [--limit N]

Each record: the case, family, batch, mode, optimizer, precision, the
``measured`` block of :func:`training.memtrace.measure.run`, the
environment, the method and the source (measured by us, on this CPU).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

from tqdm import tqdm

from training.zoo.real.torchvision_compat import importable_torchvision

importable_torchvision()

from training.memtrace import measure  # noqa: E402
from training.memtrace.models import BATCHES, CASES  # noqa: E402

OUT = Path("data/memtrace/records.jsonl")
METHOD = ("TorchDispatchMode over every ATen op + weakref.finalize on each output storage: every "
          "tensor allocation and free in order (training/memtrace/trace.py); peak of live tensor bytes")
SOURCE = "measured by us: perfseer-rt training/memtrace on this machine's CPU (PyTorch eager)"
#: (mode, optimizer, precision) run per case at its first batch size ...
CONFIGS = [("train", "sgd", "fp32"), ("train", "sgd-momentum", "fp32"), ("train", "adam", "fp32"),
           ("train", "adamw", "fp32"), ("train", "adadelta", "fp32"), ("train", "adamw", "amp-bf16"),
           ("inference", None, "fp32"), ("inference", None, "amp-bf16")]
#: ... and at its second (this machine's two cores are shared)
CONFIGS_SECOND = [("train", "adamw", "fp32"), ("inference", None, "fp32")]
#: Cases whose traces ran after the dev families: a shorter list at the first batch too
#: (the optimizer rules were checked on every family above; these check the activation rules)
SHORT = [("train", "sgd", "fp32"), ("train", "adam", "fp32"), ("train", "adamw", "amp-bf16"),
         ("inference", None, "fp32"), ("inference", None, "amp-bf16")]
FULL_CASES = ("resnet18", "resnet50", "vit_tiny_patch16_224", "mlp-relu-784", "mlp-gelu-ln-512")


def run_id(case: str, batch: int, mode: str, opt: str | None, prec: str) -> str:
    return f"{case}|b{batch}|{mode}|{opt or '-'}|{prec}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--limit", type=int, default=0, help="stop after N new runs")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out.exists():
        done = {json.loads(line)["id"] for line in out.read_text().splitlines() if line.strip()}
    names = [c for c in args.cases.split(",") if c] or list(CASES)
    def configs(case: str, first: bool) -> list[tuple[str, str | None, str]]:
        if not first:
            return CONFIGS_SECOND
        return CONFIGS if case in FULL_CASES else SHORT

    todo = [(c, b, *cfg) for c in names for i, b in enumerate(BATCHES[CASES[c].kind])
            for cfg in configs(c, i == 0) if run_id(c, b, *cfg) not in done]
    if args.limit:
        todo = todo[: args.limit]
    env = measure.environment()
    with out.open("a") as fh:
        for name, batch, mode, opt, prec in tqdm(todo, desc="memtrace"):
            case = CASES[name]
            measured = measure.run(case, batch, mode, opt, prec)
            rec = {"id": run_id(name, batch, mode, opt, prec), "case": name, "family": case.family,
                   "batch": batch, "input_shape": [batch, *case.shape], "mode": mode, "optimizer": opt,
                   "precision": prec, "steps": measure.STEPS, "measured": measured, "environment": env,
                   "method": METHOD, "source": SOURCE, "date": date.today().isoformat()}
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
