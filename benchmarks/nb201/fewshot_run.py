"""``python -m benchmarks.nb201 fewshot``: the few-shot benchmark, end to end.

1. Selection: pre-train on every device but the test and validation devices;
   score each adapter on the validation devices (pool outside the k samples).
2. Test: pre-train on every device but the test devices; adapt each test
   device from k = 10, 20, 50, 100 and all (720) trimmed-pool samples with the
   adapter chosen in 1; score on HELP's trimmed test set over ``draws`` draws.

Writes ``fewshot.json`` and ``fewshot.md`` into ``--out``. Pre-trained
device profiles are cached (``--cache``), so a repeated run takes seconds.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from benchmarks.nb201 import fewshot
from benchmarks.nb201.help_data import DEVICES, HelpData, device_kind, load_help
from training.byod.errors import ByodError

#: Test devices (never in any pre-training): two GPUs (batch 1 and 256), a
#: desktop CPU and two phones. The HELP data holds no accelerator (FPGA, TPU,
#: Eyeriss); see the report.
TEST = ("titanxp_1", "titanxp_256", "gold_6240", "pixel3", "samsung_s7")
#: Validation devices (adapter selection only): one of each kind, none a test device.
VALIDATION = ("1080ti_1", "2080ti_32", "silver_4114", "essential_ph_1", "samsung_a50")
PUBLISHED_HELP_10 = 0.932


def log(msg: str) -> None:
    print(f"[nb201 fewshot {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(csv: str | None, out: Path, test: Sequence[str], validation: Sequence[str], draws: int,
        cache: Path, command: str, cfg: fewshot.PretrainConfig | None = None) -> dict:
    cfg = cfg or fewshot.PretrainConfig()
    t_start = time.perf_counter()
    data = load_help(csv)
    for d in [*test, *validation]:
        if d not in data.latency:
            raise ByodError(f"device {d!r} is not a column of the CSV (it has {', '.join(data.devices)})")
    if set(test) & set(validation):
        raise ByodError(f"devices both test and validation: {sorted(set(test) & set(validation))}")
    sel_pre = [d for d in data.devices if d not in test and d not in validation]
    pre = [d for d in data.devices if d not in test]
    if not sel_pre:
        raise ByodError("no device left for pre-training; hold out fewer")
    t0 = time.perf_counter()
    z_sel, _ = fewshot.pretrain(data, sel_pre, cfg, cache)
    selection = fewshot.select(data, z_sel, validation, draws)
    t_sel = time.perf_counter() - t0
    log(f"selection on {list(validation)}: {selection['chosen']}")
    z, t_pre = fewshot.pretrain(data, pre, cfg, cache)
    results: dict = {"test_devices": list(test), "pretrain_devices": pre, "selection_pretrain_devices": sel_pre,
                     "selection": selection, "draws": draws, "pretrain_config": cfg.__dict__, "devices": {}}
    for d in test:
        results["devices"][d] = fewshot.evaluate(data, z, d, selection, draws)
        log(f"{d}: " + ", ".join(f"k={k} {r['spearman']:.3f}" for k, r in results["devices"][d].items()))
    results["nearest_device"] = {}
    for d in test:  # how alike the test device is to any one pre-training device (measured, test set)
        _, t_idx = fewshot.protocol.protocol_sets(data.latency[d])
        rho = {s: fewshot.protocol.spearman(data.latency[s][t_idx], data.latency[d][t_idx]) for s in pre}
        best = max(rho, key=lambda s: rho[s])
        results["nearest_device"][d] = {"device": best, "spearman": rho[best]}
    results["pretrain_fit_spearman_test_archs"] = {
        d: fewshot.protocol.spearman(z[900:1900, j], data.latency[d][900:1900]) for j, d in enumerate(pre)}
    ks = list(next(iter(results["devices"].values())))
    results["mean"] = {k: {m: float(np.mean([results["devices"][d][k][m] for d in test]))
                           for m in ("spearman", "mape", "within_10")} for k in ks}
    results["run"] = {"command": command, "seconds": {"selection": t_sel, "pretrain": t_pre,
                                                      "total": time.perf_counter() - t_start}}
    out.mkdir(parents=True, exist_ok=True)
    (out / "fewshot.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "fewshot.md").write_text(markdown(results, data))
    log(f"wrote {out / 'fewshot.md'}")
    return results


def _table(r: dict, metric: str, d: int) -> list[str]:
    ks = list(r["mean"])
    lines = ["| device | kind | " + " | ".join(k if int(k) < 900 else "all (720)" for k in ks) + " |",
             "|---|---|" + "---|" * len(ks)]
    for dev, curve in r["devices"].items():
        cells = [f"{curve[k][metric]:.{d}f} +- {curve[k][metric + '_std']:.{d}f}" if curve[k]["draws"] > 1
                 else f"{curve[k][metric]:.{d}f}" for k in ks]
        lines.append(f"| {dev} | {device_kind(dev)} | " + " | ".join(cells) + " |")
    lines.append("| **mean** | | " + " | ".join(f"**{r['mean'][k][metric]:.{d}f}**" for k in ks) + " |")
    return lines


def markdown(r: dict, data: HelpData) -> str:
    m10 = r["mean"]["10"]["spearman"]
    sel = r["selection"]
    L = ["# Few-shot latency prediction on NAS-Bench-201 (HELP protocol)", "",
         "A new device from 10 of its measurements, after pre-training on other devices "
         "(`benchmarks/nb201/fewshot.py`; latencies measured by others, published with HELP: "
         "`../shared/external/help-nb201/`). Reproduce:", "",
         f"    {r['run']['command']}", "",
         "## Headline", "",
         f"- Mean Spearman over {len(r['devices'])} test devices at **10 samples: {m10:.3f}** "
         f"({'at or above' if m10 >= PUBLISHED_HELP_10 else 'below'} HELP's published {PUBLISHED_HELP_10} with "
         "10 samples, which was measured on its own test devices), "
         + ", ".join(f"{k if int(k) < 900 else 'all 720'}: {v['spearman']:.3f}" for k, v in r["mean"].items()
                     if k != "10") + f"; mean and spread over {r['draws']} random draws of the k samples.",
         "- Test devices, never seen in pre-training or in choosing any setting: "
         + ", ".join(f"{d} ({DEVICES.get(d, ('?', 0, d))[2]})" for d in r["devices"]) + ". "
         "The HELP data holds no accelerator (FPGA, Edge TPU, Eyeriss are not in `../shared`), so the "
         "kinds covered are GPU (batch 1 and 256), CPU and phone.",
         "- Adapting a device from 10 samples takes "
         f"{max(c['10']['fit_seconds'] for c in r['devices'].values()) * 1e3:.0f} ms at most, from all 720 "
         f"{max(c['900']['fit_seconds'] for c in r['devices'].values()) * 1e3:.0f} ms; pre-training "
         f"{r['run']['seconds']['pretrain']:.0f} s on one shared core (once; cached).", "",
         "## Spearman on the trimmed test set (mean +- std over draws)", ""]
    L += _table(r, "spearman", 3)
    L += ["", "How alike each test device is to its nearest pre-training device (Spearman of the two devices' "
          "*measured* latencies on the test set; not available to the method, shown to explain the spread): "
          + ", ".join(f"{d} ~ {v['device']} {v['spearman']:.3f}" for d, v in r["nearest_device"].items())
          + ". A device unlike every pre-training device (pixel3) is where 10 samples fall short."]
    L += ["", "## MAPE % (the line also fits the scale)", ""] + _table(r, "mape", 2)
    L += ["", "## Within +-10 % (share of test architectures, %)", ""] + _table(r, "within_10", 1)
    L += ["", "## How the settings were chosen", "",
          f"Validation devices {', '.join(sel['validation_devices'])} (one GPU at batch 1, a GPU at batch 32, "
          "a CPU, two phones; none a test device) were held out of a separate pre-training on "
          f"{len(r['selection_pretrain_devices'])} devices; each adapter was scored by mean Spearman on "
          "their trimmed pool outside the k samples (never a test architecture, never a test device):", "",
          "| adapter | " + " | ".join(sel["chosen"]) + " |", "|---|" + "---|" * len(sel["chosen"])]
    for name, row in sel["spearman_pool_rest"].items():
        L.append(f"| {name} | " + " | ".join(f"{v:.3f}" for v in row.values()) + " |")
    L.append("| **chosen** | " + " | ".join(sel["chosen"].values()) + " |")
    L += ["", "The network's settings (37-feature encoding, two hidden layers of 128, 600 full-batch Adam "
          "epochs, lr 3e-3, weight decay 1e-4, 3 seeds) were fixed before any test device was scored and "
          "not tuned afterwards.", "",
          "## Method", "",
          "- **Pre-training** on the pool architectures (0..899, untrimmed) of "
          f"{len(r['pretrain_devices'])} devices ({', '.join(r['pretrain_devices'])}): a network maps the "
          "cell encoding (one-hot operation per edge, operation counts, cut by `none`, dead operations) to "
          "each device's standardized log latency. Its outputs are an architecture's *device profile*. "
          "Fit on the test architectures (Spearman against each pre-training device's own measurements): "
          + ", ".join(f"{d} {v:.3f}" for d, v in r["pretrain_fit_spearman_test_archs"].items()) + ".",
          "- **Adaptation** (see the module doc): `similarity` weights the pre-training devices by how "
          "well their profile ranks the k measured architectures (HELP's hardware embedding: a device is "
          "known by its latencies on a few architectures), then fits a line; `ridge` fits log latency to "
          "the mean profile plus penalized deviations toward individual devices. Temperature or penalty "
          "by leave-one-out on the k samples.",
          "- Protocol exactly as `reports/nb201/README.md` (HELP's `loader.py`): pool 0..899, test "
          "900..1899, each trimmed per device to its 10..90 % latency band; k samples drawn from the "
          "trimmed pool, seeded by (draw, device, k).",
          "- Graph-free: the cell string is the input, so a new device's CSV column is all it takes "
          "(`--csv FILE --test DEV ... [--validation DEV ...]`).", "",
          "## Limits", "",
          "- NAS-Bench-201 cells only (the encoding is the cell string); the ONNX path for any model is "
          "`perfseer-rt calibrate` / `python -m training.byod calibrate`.",
          "- pixel3 and samsung_s7 stay hardest: even SeerNet on all 720 pool samples reaches 0.890 / "
          "0.907 there (`README.md`), and samsung_s7 is stored in whole milliseconds.", ""]
    return "\n".join(L)
