"""``reports/gpu-prior/neusight_e2e.{md,json}`` from a whole-model check
(:func:`training.gpuprior.neusight_e2e.check`)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from perfseer_rt.gpu.calibrate import Correction
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.gpuprior.neusight_calibration import calibrations, corrected, summary
from training.gpuprior.neusight_labels import KERNEL_GPUS, OUT, SOURCE


def summary_table(by: dict[str, dict[str, float]]) -> list[str]:
    """Markdown rows of a :func:`summary`, header included."""
    lines = ["| device | labels | MAPE % | median error % | max abs error % |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for dev, s in by.items():
        held = "" if dev in KERNEL_GPUS else " (no kernel rows)"
        lines.append(f"| {dev}{held} | {s['n']} | {s['mape']:.1f} | {s['median_error']:+.1f} | "
                     f"{s['max_abs']:.1f} |")
    return lines


def write_report(doc: dict[str, Any]) -> None:
    rows = doc["rows"]
    doc["summary"] = summary(rows)
    doc["train_summary"] = summary(doc["train_rows"])
    doc["calibrations"] = calibrations(doc)
    for r in doc["train_rows"]:  # the plan's cross-task check: inference-fitted scales on training
        cal = doc["calibrations"].get(r["device"])
        r["calibrated_error"] = (round(corrected(Correction(**cal["correction"]), r) / r["e2e_ms"] - 1, 4)
                                 if cal and cal["ship"] else None)
    atomic_write_bytes(OUT / "neusight_e2e.json", json.dumps(doc, indent=1).encode())
    lines = ["# The GPU prior on whole-model latencies measured by others (NeuSight)\n",
             "`python -m training.gpuprior.neusight_e2e check` (labels: `data/neusight-e2e/`, "
             f"from `{SOURCE}` at {doc['commit'][:12]}). Each label is a whole-model forward pass "
             "measured by the NeuSight authors: PyTorch 2.1 eager, fp32, CUDA events, the mean of "
             "the fastest 5 of 25 runs. Each prediction is `perfseer-rt predict --device D "
             "--batch B --dim seq=S` on our structure-only export of the same Hugging Face config. "
             "Error = predicted / measured - 1. The prior's kernel rows come from "
             f"{', '.join(KERNEL_GPUS)} (single operators only); the H100, L4 and A100-SXM4 have "
             "no rows at all.\n",
             *summary_table(doc["summary"])]
    lines += ["\n| device | model | batch | seq | measured ms | predicted ms | error % |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['device']} | {r['model']} | {r['batch']} | {r['seq']} | {r['e2e_ms']:.2f} | "
                     f"{r['predicted_ms']:.2f} | {r['error'] * 100:+.1f} |")
    lines += ["\n## Training step (forward + backward)\n",
              "`predict --mode train --device D` prices one step from the forward kernels "
              "(`perfseer_rt/gpu/train_step.py`: backward kernels per forward kernel, a "
              "cross-entropy loss, an AdamW update). NeuSight timed `model(input_ids)` with the "
              "model in train mode (dropout on) and `loss.backward()` separately, without an "
              "optimizer step; so the comparison is our forward against their forward and our "
              "loss + backward against their backward, the AdamW update shown beside.\n",
              *summary_table(doc["train_summary"])]
    lines += ["\n| device | model | batch | seq | measured fw / bw ms | predicted fw / bw ms | "
              "error (fw+bw) % | AdamW ms |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in doc["train_rows"]:
        lines.append(f"| {r['device']} | {r['model']} | {r['batch']} | {r['seq']} | {r['fw_ms']:.1f} / "
                     f"{r['bw_ms']:.1f} | {r['predicted_fw_ms']:.1f} / {r['predicted_bw_ms']:.1f} | "
                     f"{r['error'] * 100:+.1f} | {r['optimizer_ms']:.1f} |")
    lines += ["\n## Calibrated entries (plan: `neusight_calibration_plan.md`)\n",
              "Each kernel-row entry with labels of at least two models gets a pure scale fitted on "
              "its inference labels, shipped where its leave-one-model-out MAPE (each model predicted "
              "with the scale fitted on the other models) beats the uncalibrated prior on the same "
              "labels. h100 and l4 stay uncalibrated: their figures above are the zero-shot check.\n",
              "| device | labels | uncalibrated MAPE % | leave-one-model-out MAPE % | median % | scale | shipped |",
              "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for dev, c in doc["calibrations"].items():
        lines.append(f"| {dev} | {c['n']} | {c['uncalibrated_mape']:.1f} | {c['mape']:.1f} | "
                     f"{c['median_error']:+.1f} | {c['scale']:.3f} | {'yes' if c['ship'] else 'no'} |")
    crossed = [r for r in doc["train_rows"] if r["calibrated_error"] is not None]
    if crossed:
        before = np.mean([abs(r["error"]) for r in crossed]) * 100
        after = np.mean([abs(r["calibrated_error"]) for r in crossed]) * 100
        lines.append(f"\nCross-task check (inference-fitted scale on the training labels of calibrated "
                     f"entries, {len(crossed)} runs: "
                     + ", ".join(f"{r['device']} {r['model']} b{r['batch']} {r['error'] * 100:+.1f} -> "
                                 f"{r['calibrated_error'] * 100:+.1f} %" for r in crossed)
                     + f"): MAPE {before:.1f} -> {after:.1f} %.")
    lines.append("\nLayer extrapolation against a full export (same prior, same shapes):\n")
    for a in doc["additivity"]:
        lines.append(f"- {a['model']} on {a['device']} (batch {a['batch']}, seq {a['seq']}): full "
                     f"{a['full_export_ms']:.3f} ms, from 1 and 2 layers {a['from_1_and_2_layers_ms']:.3f} ms")
    atomic_write_bytes(OUT / "neusight_e2e.md", ("\n".join(lines) + "\n").encode())
    print("\n".join(lines))
