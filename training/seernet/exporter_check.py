"""Pair two user checks of the same models exported by torch's two exporters
(``python -m training.seernet.user_check --exporter torchscript|dynamo``)
and report how the measurements and the predictions move with the exporter.

    python -m training.seernet.exporter_check \\
        reports/cpu-amd-epyc-1t/exporter_check_torchscript.json \\
        reports/cpu-amd-epyc-1t/exporter_check_dynamo.json \\
        --out reports/cpu-amd-epyc-1t/exporter_check.md

Rows are paired by (spec, batch); a model only one exporter could export is
listed apart. Ratios are dynamo / TorchScript.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.seernet.user_check import METRICS, summary


def paired(ts: dict[str, Any], dyn: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The rows of the two checks with the same (spec, batch), in ``ts``'s order."""
    by_key = {(r["spec"], r["batch"]): r for r in dyn["rows"]}
    return [(r, by_key[(r["spec"], r["batch"])]) for r in ts["rows"] if (r["spec"], r["batch"]) in by_key]


def report(ts: dict[str, Any], dyn: dict[str, Any], names: Sequence[str]) -> str:
    """The markdown report of the pairs."""
    pairs = paired(ts, dyn)
    lines = [f"# Exporter check: the same models through torch's two exporters ({len(pairs)} pairs)",
             "", f"`python -m training.seernet.exporter_check {' '.join(names)}`", "",
             f"Environment (both): {json.dumps(ts.get('environment', {}))}", "",
             "| model | batch | latency ms TS / dyn (ratio) | memory MiB TS / dyn (ratio) | "
             "memory predicted TS / dyn | memory error TS / dyn % | in interval TS / dyn |",
             "|---|---:|---|---|---|---|---|"]
    for a, b in pairs:
        la, lb = a["latency_ms"]["measured"], b["latency_ms"]["measured"]
        ma, mb = a["peak_mem_mb"]["measured"], b["peak_mem_mb"]["measured"]
        pa, pb = a["peak_mem_mb"]["predicted"], b["peak_mem_mb"]["predicted"]
        ea, eb = a["peak_mem_mb"]["error_pct"], b["peak_mem_mb"]["error_pct"]
        ia, ib = a["peak_mem_mb"]["inside_interval"], b["peak_mem_mb"]["inside_interval"]
        lines.append(f"| {a['spec'].split('model=')[-1].split(',')[0]} | {a['batch']} | "
                     f"{la:.1f} / {lb:.1f} ({lb / la:.2f}) | {ma:.1f} / {mb:.1f} ({mb / ma:.2f}) | "
                     f"{pa:.1f} / {pb:.1f} | {ea:+.1f} / {eb:+.1f} | {ia} / {ib} |")
    lines += ["", "| | TorchScript exports | dynamo exports |", "|---|---|---|"]
    sa = summary([a for a, _ in pairs])
    sb = summary([b for _, b in pairs])
    for m in METRICS:
        lines.append(f"| {m} MAPE / median error / in interval | {sa[m]['mape']:.1f} / "
                     f"{sa[m]['median_error']:+.1f} / {sa[m]['coverage']:.0f} % | {sb[m]['mape']:.1f} / "
                     f"{sb[m]['median_error']:+.1f} / {sb[m]['coverage']:.0f} % |")
    for m in METRICS:
        ratio = np.array([b[m]["measured"] / a[m]["measured"] for a, b in pairs])
        lines.append(f"| measured {m} dynamo / TorchScript: median, min-max | "
                     f"{np.median(ratio):.3f}, {ratio.min():.2f}-{ratio.max():.2f} | |")
    only = sorted({r["spec"] for r in ts["rows"]} ^ {r["spec"] for r in dyn["rows"]})
    failed = [f["spec"] for doc in (ts, dyn) for f in doc.get("not_exportable", [])]
    if only or failed:
        lines += ["", f"Measured with one exporter only: {', '.join(only) or 'none'}; not exportable: "
                      f"{', '.join(failed) or 'none'}."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.seernet.exporter_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("torchscript", type=Path)
    ap.add_argument("dynamo", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    docs = [json.loads(p.read_text()) for p in (a.torchscript, a.dynamo)]
    text = report(docs[0], docs[1], [str(a.torchscript), str(a.dynamo), "--out", str(a.out)])
    atomic_write_bytes(a.out, text.encode())
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
