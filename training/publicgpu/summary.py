"""Counts of the published records and of the export log (``status``)."""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from training.publicgpu.exports import Job, latest


def record_counts(records: Iterable[dict]) -> dict[str, dict[str, int]]:
    """Record counts by source/GPU, mode, layout, framework version and kind of architecture."""
    tables: dict[str, Counter[str]] = {k: Counter() for k in
                                       ("source / gpu", "source / mode / layout / torch", "arch_kind")}
    for r in records:
        src = r["provenance"]["repository"]
        tables["source / gpu"][f"{src} / {r['env']['gpu_name']}"] += 1
        tables["source / mode / layout / torch"][
            f"{src} / {r['kind']} / {r['setup']['layout']} / {r['env']['torch_version']}"] += 1
        tables["arch_kind"][f"{src} / {r['arch_kind']}"] += 1
    return {k: dict(sorted(v.items())) for k, v in tables.items()}


def export_summary(jobs: list[Job], entries: list[dict]) -> dict:
    """Jobs done and left, outcomes by exporter (dynamo fallbacks included),
    failure reasons (first 60 characters) by count, export time."""
    last = latest(entries)
    keys = {j.key for j in jobs}
    archs = {k[:2] for k in keys}
    done = {k: e for k, e in last.items() if k[:2] in archs}
    by_exporter: dict[str, Counter[str]] = {}
    reasons: Counter[str] = Counter()
    seconds: dict[str, list[float]] = {}
    for (_, _, exporter), e in sorted(done.items()):
        status = e["status"]
        ext = e.get("extract") or {}
        if status == "ok" and ext.get("status") == "error":
            status = "ok, extract failed"
            reasons[f"extract: {str(ext.get('error'))[:60]}"] += 1
        by_exporter.setdefault(exporter, Counter())[status] += 1
        if e["status"] != "ok":
            reasons[f"{e['status']}: {str(e.get('reason'))[:60]}"] += 1
        if e["status"] == "ok" and e.get("seconds") is not None:
            seconds.setdefault(exporter, []).append(float(e["seconds"]))
    median = {k: sorted(v)[len(v) // 2] for k, v in seconds.items()}
    usable = {k[:2] for k, e in done.items()
              if e["status"] == "ok" and (e.get("extract") or {}).get("status") == "ok"}
    return {"exporters": exporter_agreement(done), "jobs": len(jobs),
            "done": len(keys & set(done)), "left": len(keys - set(done)),
            "fallbacks": len(set(done) - keys), "architectures": len(archs),
            "architectures_usable": len(usable),
            "by_exporter": {k: dict(v) for k, v in sorted(by_exporter.items())},
            "reasons": dict(reasons.most_common()),
            "median_seconds": median, "total_hours": {k: round(sum(v) / 3600, 2) for k, v in seconds.items()}}


def exporter_agreement(done: dict[tuple[str, int, str], dict]) -> dict:
    """Architectures rebuilt by both exporters: the dynamo graph's FLOPs and
    extracted node count at the label batch over the TorchScript graph's."""
    rows = []
    for (model, img, exporter), e in done.items():
        other = done.get((model, img, "torchscript"))
        if exporter != "dynamo" or other is None:
            continue
        a, b = other.get("extract") or {}, e.get("extract") or {}
        if a.get("status") == "ok" and b.get("status") == "ok" and a.get("flops"):
            rows.append((f"{model}@{img}", b["flops"] / a["flops"], b["nodes"] / max(1, a["nodes"])))
    if not rows:
        return {"pairs": 0}
    worst = max(rows, key=lambda r: abs(r[1] - 1.0))
    return {"pairs": len(rows), "flops_ratio_median": sorted(r[1] for r in rows)[len(rows) // 2],
            "flops_ratio_worst": [worst[0], round(worst[1], 4)],
            "nodes_ratio_median": sorted(r[2] for r in rows)[len(rows) // 2]}
