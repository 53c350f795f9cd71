"""How the shipped CPU predictor does on LLMs as onnxruntime-genai builds them.

The GenAI builder's models (int4 MatMulNBits or fp32 MatMul,
GroupQueryAttention with a KV cache, SkipSimplifiedLayerNormalization) are
what people run LLMs on the CPU with, and the predictor was trained on no
such model. Each (architecture, precision, shape point) is built
(:func:`training.zoo.real.genai.build_genai`, ``base`` size, random weights),
measured with ``perfseer-rt profile --dim ...`` pinned to one core and
predicted with ``perfseer-rt predict --dim ...`` at the same named dims
(``kv_cache_dim`` left to the extractor in both); the rows and summary are
those of :mod:`training.seernet.user_check`. Resumable: rows already in
``--out`` are kept.

Run (quiet core): ``training/dataset/quiet_core.sh python -m
training.seernet.genai_check --out reports/cpu-amd-epyc-1t/genai_check.json``
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx
from tqdm import tqdm

from perfseer_rt.profile import environment
from training.seernet.user_check import METRICS, _cli, _save, compare, probe_core, summary
from training.zoo.real.genai import build_genai

#: (batch, new tokens, cached tokens): a prompt, and decode steps.
POINTS = ((1, 128, 0), (1, 1, 127), (4, 1, 511))


def dims_args(batch: int, seq: int, past: int) -> list[str]:
    dims = {"batch_size": batch, "sequence_length": seq, "past_sequence_length": past,
            "total_sequence_length": seq + past}
    return [a for k, v in dims.items() for a in ("--dim", f"{k}={v}")]


def model_path(arch: str, precision: str, work: Path) -> Path:
    """The model's file in ``work``, built there on first use."""
    path = work / f"{arch}-{precision}" / "model.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(build_genai(arch, precision, "base"), str(path), save_as_external_data=True,
                  location="model.onnx.data")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.seernet.genai_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--device", default="cpu-amd-epyc-1t")
    ap.add_argument("--archs", nargs="+", default=["llama", "qwen2"])
    ap.add_argument("--precisions", nargs="+", default=["int4", "fp32"])
    ap.add_argument("--core", type=int, default=1, help="CPU core the profiler is pinned to")
    ap.add_argument("--work", type=Path, default=Path("/tmp/perfseer-genai-check"))
    ap.add_argument("--repredict", action="store_true", help="keep the measurements, predict again")
    a = ap.parse_args(argv)
    doc: dict[str, Any] = json.loads(a.out.read_text()) if a.out.exists() else {"rows": []}
    if a.repredict:
        for r in tqdm(doc["rows"], desc="re-predict"):
            arch, precision = r["model"].split("-")
            args = [str(model_path(arch, precision, a.work)), *dims_args(r["batch"], r["seq"], r["past"])]
            r.update(compare({m: r[m]["measured"] for m in METRICS},
                             _cli(["predict", *args, "--device", a.device])))
        _save(a.out, doc)
    doc.setdefault("environment", {
        **{k: v for k, v in environment().items() if k.startswith("cpu") or k.startswith("onnx")},
        "measured_with": f"taskset -c {a.core} perfseer-rt profile MODEL --dim ... --json (CPU "
                         "provider, 1 thread, defaults)",
        "models": "onnxruntime-genai model builder, CPU, training.zoo.real.genai 'base' size "
                  "(6 layers, hidden 768), random weights"})
    doc["predicted_with"] = f"perfseer-rt predict MODEL --dim ... --device {a.device} --json"
    done = {(r["model"], r["batch"], r["seq"], r["past"]) for r in doc["rows"]}
    todo = [(f"{arch}-{p}", b, s, past) for arch in a.archs for p in a.precisions
            for b, s, past in POINTS if (f"{arch}-{p}", b, s, past) not in done]
    for name, batch, seq, past in tqdm(todo, desc="genai check"):
        arch, precision = name.split("-")
        path = model_path(arch, precision, a.work)
        args = [str(path), *dims_args(batch, seq, past)]
        probe = probe_core(a.core)
        prof = _cli(["profile", *args], core=a.core)
        probe = (probe + probe_core(a.core)) / 2
        measured = {m: float(prof[m]) for m in METRICS}
        pred = _cli(["predict", *args, "--device", a.device])
        doc["rows"].append({"model": name, "batch": batch, "seq": seq, "past": past,
                            "speed_probe_ms": probe, **compare(measured, pred)})
        _save(a.out, doc)
    if not a.out.exists():
        _save(a.out, doc)
    print(json.dumps(summary(doc["rows"]), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
