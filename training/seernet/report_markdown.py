"""``report.md``: the report dict (:func:`training.seernet.report.run_report`)
as Markdown: per split the models' MAPE and +-10 % share, per batch size,
the shipped predictor on held-out data, the noise floor and the settings."""

from __future__ import annotations

import json


def fmt(v, digits=2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def markdown(report: dict, metrics: list[str]) -> str:
    d = report["data"]
    lines = ["# SeerNet and baselines: accuracy report", "",
             f"Dataset `{report['dataset']}`: {d['configurations']} configurations of "
             f"{d['architectures']} architectures; families "
             + ", ".join(f"{k} ({v})" for k, v in d["families"].items()) + ".", ""]
    if report.get("step"):
        st = report["step"]
        lines += [f"Labels: {st['definition']}. Measured with the {st['engine']} training engine "
                  "(`training/profile_train.py`), not onnxruntime; step time is the median step "
                  "over the timed window (ms); peak memory is the measuring process's peak RSS over "
                  f"its RSS before the model was built (MiB), memory method `{st['peak_mem_method']}` "
                  "(`perfseer_rt/profile/hostmem.py`). Dataset device "
                  f"`{st['dataset_device']}`.", ""]
    if report.get("command"):
        lines += ["Reproduce with:", "", "```", report["command"], "```", ""]
    lines += ["MAPE and the share of predictions within +-10 % of the measurement, on the test part of "
              "each split, in the metrics' own units. Lower MAPE is better.", ""]
    for scheme, res in report["splits"].items():
        title = {"arch": "Architecture split", "family": "Family-held-out split",
                 "real": "Real-model held-out split"}.get(scheme, scheme)
        lines += [f"## {title}", ""]
        if "skipped" in res:
            lines += [f"Skipped: {res['skipped']}.", ""]
            continue
        sz, ar = res["sizes"], res["architectures"]
        lines += [f"train {sz['train']} / val {sz['val']} / test {sz['test']} configurations "
                  f"({ar['train']} / {ar['val']} / {ar['test']} architectures); test families: "
                  + ", ".join(res["test_families"]) + ".", ""]
        head = "| model | params | " + " | ".join(f"{m} MAPE % | {m} ±10 % share" for m in metrics) \
            + " | mean MAPE % |"
        lines += [head, "|" + "---|" * (3 + 2 * len(metrics))]
        ranked = sorted(res["models"].items(),
                        key=lambda kv: (kv[1]["mean_mape"] is None, kv[1]["mean_mape"]))
        for _name, r in ranked:
            cells = " | ".join(f"{fmt(r['metrics'][m]['mape'])} | {fmt(r['metrics'][m]['within_10'], 1)}"
                               for m in metrics)
            params = "trees" if r["parameters"] is None else f"{r['parameters']:,}"
            lines.append(f"| {r['display']} | {params} | {cells} | {fmt(r['mean_mape'])} |")
        lines += ["", *(f"![{scheme} {m}](plots/{scheme}_{m}.png)" for m in metrics), ""]
        lines += _per_batch_markdown(res, metrics, [n for n, _ in ranked])
    lines += _shipped_markdown(report, metrics)
    lines += _noise_markdown(report.get("noise_floor") or [])
    lines += ["## Settings", "", "```json", json.dumps(report["train_config"], indent=1), "```", "",
              "SeerNet-Multi trains with PCGrad (`pcgrad: true` for it alone; the settings above are the "
              "shared ones).", "",
              "Parameters are summed over the per-metric models of single-metric predictors. "
              "nn-Meter-style: per-node costs summed per graph, no kernel-fusion detection. "
              "Global GBM: gradient-boosted trees on the global features.", ""]
    return "\n".join(lines)


def _noise_markdown(noise: list[dict]) -> list[str]:
    if not noise:
        return []
    lines = ["## Noise floor: reference configurations re-measured during the campaign", "",
             "| reference | measurements | median time | max deviation from median % | CV % per metric |",
             "|---|---|---|---|---|"]
    for d in noise:
        cvs = ", ".join(f"{m} {v:.1f}" for m, v in d["cv_pct"].items())
        lines.append(f"| `{d['spec'][:60]}` | {d['count']} | {d['median']:.4g} | {d['max_dev_pct']:.1f} | {cvs} |")
    return lines + [""]


def _shipped_markdown(report: dict, metrics: list[str]) -> list[str]:
    """The shipped model on the held-out test set of its split: accuracy per
    batch size, interval coverage and the warning's fire rates."""
    sh = report.get("shipped")
    if not sh or "held_out" not in sh:
        return []
    ho = sh["held_out"]
    test = report["splits"][sh["scheme"]]
    lines = ["## Shipped predictor on held-out data", "",
             f"Model `{sh['default']}` trained on the `{sh['scheme']}` split; its test set "
             f"({ho['configs']} configurations; never trained on: "
             + ", ".join(test.get("test_groups") or test.get("test_families", [])) + ") is scored below as shipped "
             f"(peak memory combined as `{sh.get('memory_combine')}`).", ""]
    if sh.get("refit"):
        ref = report.get("refit_on_all", {}).get("sizes", {})
        lines += [f"The file shipped is that model trained once more on the split's training and test "
                  f"graphs together (`--ship-all`: {ref.get('train', '?')} training configurations, the "
                  "same validation set); it has seen these held-out groups, so the figures and interval "
                  "coverage below are those of the split's model, conservative for the file shipped.", ""]
    batches = sorted({b for m in metrics for b in ho["accuracy"][m]["by_batch"]})
    lines += ["MAPE % (count) per batch size:", "",
              "| metric | all | " + " | ".join(f"b{b}" for b in batches) + " |",
              "|" + "---|" * (2 + len(batches))]
    for m in metrics:
        acc = ho["accuracy"][m]
        def cell(a):
            return ("n/a" if not a or a.get("mape") is None else f"{a['mape']:.1f} ({a['count']})")
        lines.append(f"| {m} | {cell(acc['all'])} | "
                     + " | ".join(cell(acc["by_batch"].get(b)) for b in batches) + " |")
    lines += ["", "Interval coverage (stated vs held, %; scale: \"disagreement\" where the bounds grow with "
              "the gap between SeerNet and the trees):", "",
              "| metric | scale | stated | held | count | per batch |", "|---|---|---|---|---|---|"]
    for m, c in ho["coverage"].items():
        per = ", ".join(f"b{b} {v:.0f}" for b, v in c["by_batch"].items())
        iv = sh["uncertainty"]["intervals"][m]
        scale = iv.get("scale", "none") + (f" (floor {iv['floor']:g})" if iv.get("floor") else "")
        lines.append(f"| {m} | {scale} | {c['stated']:.0f} | {fmt(c['held'], 1)} | {c['count']} | {per} |")
    w = ho["warning"]
    unc_cal = sh["uncertainty"]["calibration"]
    lines += ["", f"Out-of-distribution warning (distance score > {sh['uncertainty']['threshold']:.3f}, "
              "chosen on the calibration sets " + ", ".join(f"{k} ({v})" for k, v in unc_cal["sets"].items())
              + f"): on this held-out test it fires on {fmt(w['fires_on_error_gt_25_pct'], 0)} % of the "
              f"{w['configs_gt_25']} configurations with > 25 % error (worst metric) and on "
              f"{fmt(w['fires_on_error_le_10_pct'], 0)} % of the {w['configs_le_10']} within 10 %.", ""]
    dis = sh["uncertainty"].get("disagreement")
    if dis:
        lines += ["Disagreement warning (|log SeerNet - log trees| above a per-metric threshold, chosen on the "
                  "same sets; a metric's kept only where it raises the J of any warning there; "
                  "`training.seernet.recalibrate` may choose them again on real-model checks): thresholds "
                  + (", ".join(f"{m} {t:.3f}" for m, t in dis["thresholds"].items()) or "none kept") + "."]
        for m, r in (ho.get("disagreement_warning") or {}).items():
            lines.append(f"- {m}: on this held-out test it fires on {fmt(r['fires_on_error_gt_25_pct'], 0)} % of "
                         f"the {r['configs_gt_25']} configurations with > 25 % {m} error and on "
                         f"{fmt(r['fires_on_error_le_10_pct'], 0)} % of the {r['configs_le_10']} within 10 %.")
        a = ho.get("any_warning")
        if a:
            lines.append(f"- either warning: fires on {fmt(a['fires_on_error_gt_25_pct'], 0)} % of the "
                         f"{a['configs_gt_25']} with > 25 % error (worst metric) and on "
                         f"{fmt(a['fires_on_error_le_10_pct'], 0)} % of the {a['configs_le_10']} within 10 %.")
        lines.append("")
    return lines


def _per_batch_markdown(res: dict, metrics: list[str], order: list[str]) -> list[str]:
    """Per batch size: MAPE % of every model (test configurations of that batch)."""
    names = [n for n in order if res["models"][n].get("per_batch")]
    if not names:
        return []
    batches = sorted({b for n in names for b in res["models"][n]["per_batch"]}, key=int)
    lines = []
    for m in metrics:
        lines += [f"{m} MAPE % per batch size (test configurations of that batch):", "",
                  "| batch | configs | " + " | ".join(res["models"][n]["display"] for n in names) + " |",
                  "|" + "---|" * (2 + len(names))]
        for b in batches:
            cells = [res["models"][n]["per_batch"].get(b, {}).get(m, {}) for n in names]
            count = next((c.get("count") for c in cells if c.get("count")), 0)
            lines.append(f"| {b} | {count} | " + " | ".join(fmt(c.get("mape")) for c in cells) + " |")
        lines.append("")
    return lines
