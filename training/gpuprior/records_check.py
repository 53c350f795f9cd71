"""The GPU prior against GPU records of our own (issue 15, item 4): on the
same records, the prior alone and the device entry as shipped (calibrated
where it is), beside which ``training.seernet.report`` adds the predictor
trained on the records.

    python -m training.gpuprior.records_check --dataset data/gpu/h100/inference --device h100

Every successful inference record that is not a drift re-measure
(``reference``) is predicted: its architecture exported once from the
record's zoo config (``--zoo``: the campaign's stand-in for tests), the
record's own input shapes, ``predict --device``; the prior alone is the sum
of the answer's per-family parts, the entry's answer its value. Writes
``<out>/records_<device>.{json,md}`` (default out: ``reports/gpu-prior``).
Before GPU records exist it runs on a dry-run dataset
(``python -m training.campaign --target cuda-inference --dry-run``), whose
CPU latencies say nothing of a GPU: that only exercises the path.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr
from tqdm import tqdm

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict import api
from training.campaign.zoo_cases import export_case
from training.seernet.data import read_records

REPO = Path(__file__).resolve().parents[2]


def usable(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Successful inference records with a latency, drift re-measures left out."""
    return [r for r in records if r.get("status") == "ok" and not r.get("reference")
            and r.get("kind", "inference") == "inference"
            and (r.get("metrics") or {}).get("latency_ms", 0) > 0]


def check(dataset: Path, device: str, tmp: Path, zoo_name: str | None = None) -> list[dict[str, Any]]:
    """One row per usable record: measured, prior-only and shipped ms."""
    rows, exported = [], {}
    tmp.mkdir(parents=True, exist_ok=True)
    for r in tqdm(usable(read_records(dataset)), desc=f"records on {device}"):
        arch = r["arch_id"]
        if arch not in exported:
            exported[arch] = export_case(json.dumps(r["config"]), str(tmp / f"{arch}.onnx"), zoo_name)["path"]
        shapes = {k: tuple(v) for k, v in (r.get("input_shapes") or {}).items()} or None
        (res,) = api.predict(exported[arch], batch=None if shapes else r["batch"], input_shapes=shapes,
                             device=device)
        lat = res["metrics"]["latency_ms"]
        rows.append({"arch_id": arch, "family": r.get("family", ""), "batch": r["batch"],
                     "graph_key": r.get("graph_key"), "measured_ms": float(r["metrics"]["latency_ms"]),
                     "prior_ms": round(float(sum(lat["parts"].values())), 4),
                     "shipped_ms": float(lat["value"]), "launch_ms": float(lat["launch_overhead_ms"]),
                     "record_device": r.get("device")})
    return rows


def _scores(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    err = pred / meas - 1
    rank = float(spearmanr(pred, meas).statistic) if len(meas) > 2 else float("nan")
    return {"mape": float(np.mean(np.abs(err)) * 100), "median_error": float(np.median(err) * 100),
            "spearman": float(rank)}


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per family and over all rows: n, and MAPE / median error / Spearman
    of the prior alone and of the shipped entry."""
    out: dict[str, dict[str, Any]] = {}
    groups = {"all": rows, **{f: [r for r in rows if r["family"] == f] for f in sorted({r["family"] for r in rows})}}
    for name, rs in groups.items():
        meas = np.array([r["measured_ms"] for r in rs])
        out[name] = {"n": len(rs), "prior": _scores(np.array([r["prior_ms"] for r in rs]), meas),
                     "shipped": _scores(np.array([r["shipped_ms"] for r in rs]), meas)}
    return out


def write(rows: list[dict[str, Any]], device: str, dataset: Path, out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    by = summary(rows) if rows else {}
    doc: dict[str, Any] = {"device": device, "dataset": str(dataset), "rows": rows, "summary": by}
    atomic_write_bytes(out / f"records_{device}.json", json.dumps(doc, indent=1).encode())
    lines = [f"# The GPU prior on our own records: {device}\n",
             f"`python -m training.gpuprior.records_check --dataset {dataset} --device {device}`; "
             "prior = the kernel prior alone (sum of the answer's parts), shipped = the entry's answer "
             "(calibrated where the entry is). Error = predicted / measured - 1.\n",
             "| family | records | prior MAPE % | prior median % | prior Spearman | shipped MAPE % | "
             "shipped median % | shipped Spearman |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, s in by.items():
        p, q = s["prior"], s["shipped"]
        lines.append(f"| {name} | {s['n']} | {p['mape']:.1f} | {p['median_error']:+.1f} | {p['spearman']:.3f} | "
                     f"{q['mape']:.1f} | {q['median_error']:+.1f} | {q['spearman']:.3f} |")
    atomic_write_bytes(out / f"records_{device}.md", ("\n".join(lines) + "\n").encode())
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.gpuprior.records_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", type=Path, required=True, help="a campaign dataset folder")
    ap.add_argument("--device", required=True, help="the gpu-prior device entry to check (e.g. h100)")
    ap.add_argument("--zoo", default=None, help="zoo module (default training.zoo; tests use a stand-in)")
    ap.add_argument("--out", type=Path, default=REPO / "reports" / "gpu-prior")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = check(args.dataset, args.device, Path(tmp), args.zoo)
    doc = write(rows, args.device, args.dataset, args.out)
    print(json.dumps(doc["summary"].get("all", {}), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
