"""``python -m training.publicgpu {records,export,status}``.

- ``records``: parse the shared timm benchmark CSVs and NeuSight's
  whole-model labels into campaign-format records under ``data/public-gpu/``.
- ``lambda --repo GITDIR``: Lambda's single-GPU training logs (a clone of
  ``lambdal/deeplearning-benchmark``) into ``data/public-gpu/lambda/``.
- ``export --cache DIR``: rebuild every timm architecture of the records
  structure-only as ONNX in ``DIR`` (resumable; log ``exports.jsonl``).
- ``status``: records per source, GPU, mode, layout and PyTorch version, and
  the exports done, failed (by reason) and left.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from training.publicgpu import exports as ex
from training.publicgpu.dataset import ROOT, read
from training.publicgpu.summary import export_summary, record_counts

LOG = ROOT / "timm" / "exports.jsonl"


def _records(args) -> int:
    # lazy: parsing the timm CSVs imports timm (families), the other commands do not need it
    from training.publicgpu.build import build_all

    try:
        counts = build_all(Path(args.timm_dir), Path(args.neusight), Path(args.out))
    except (ValueError, OSError) as exc:  # a missing folder or a file that is not what it claims
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, n in sorted(counts.items()):
        print(f"{n:6d}  {name}")
    print(f"{sum(counts.values()):6d}  records in {args.out}")
    return 0


def _lambda(args) -> int:
    # lazy: as in _records, the build module reaches timm through the timm CSV parser
    from training.publicgpu.build import build_lambda

    try:
        counts, skipped = build_lambda(Path(args.repo), Path(args.out))
    except subprocess.CalledProcessError as exc:  # not a git directory
        why = (exc.stderr or "").strip().splitlines()[-1:] or [str(exc)]
        print(f"error: {args.repo}: {why[0]} (pass a clone's .git directory)", file=sys.stderr)
        return 2
    except (ValueError, OSError) as exc:  # no usable log, or a log that is not what it claims
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, n in sorted(counts.items()):
        print(f"{n:6d}  {name}")
    for reason, n in sorted(skipped.items()):
        print(f"{n:6d}  left out: {reason}")
    print(f"{sum(counts.values()):6d}  records in {args.out}")
    return 0


def _export(args) -> int:
    records = list(read(Path(args.data) / "timm"))
    if not records:
        print(f"error: no timm records under {args.data}/timm: run `python -m training.publicgpu records`",
              file=sys.stderr)
        return 2
    jobs = ex.queue(ex.architectures(records), share=args.dynamo_share)
    if args.only:
        jobs = [j for j in jobs if j.model in set(args.only)]
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    log = Path(args.log) if args.log else LOG
    statuses: Counter[str] = Counter()
    # a plain `kill` stops the run like Ctrl-C: the export process is stopped with it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for entry in ex.run(jobs, cache, log, timeout_s=args.timeout, mem_limit_mb=args.mem_limit_mb,
                        max_params_m=args.max_params_m, retry_failed=args.retry_failed,
                        limit=args.limit):
        statuses[entry["status"]] += 1
    print(f"this run: {dict(statuses)}; log {log}")
    return 0


def _status(args) -> int:
    records = list(read(Path(args.data)))
    log = Path(args.log) if args.log else LOG
    jobs = ex.queue(ex.architectures(records))
    doc = {"records": record_counts(records), "exports": export_summary(jobs, ex.read_log(log))}
    if args.json:
        print(json.dumps(doc, indent=1, sort_keys=True))
        return 0
    for table, rows in doc["records"].items():
        print(f"records by {table}:")
        for key, n in rows.items():
            print(f"  {n:6d}  {key}")
    e = doc["exports"]
    print(f"exports ({log}): {e['jobs']} jobs, {e['done']} done, {e['left']} left, "
          f"{e['fallbacks']} dynamo fallbacks; {e['architectures_usable']} of {e['architectures']} "
          "architectures have a rebuild that extracts")
    print(f"  median seconds per export: {e['median_seconds']}; hours in all: {e['total_hours']}")
    print(f"  both exporters: {e['exporters']}")
    for exporter, s in e["by_exporter"].items():
        print(f"  {exporter}: " + ", ".join(f"{k} {v}" for k, v in s.items()))
    for reason, n in e["reasons"].items():
        print(f"  {n:5d}  {reason}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.publicgpu", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("records", help="parse the published files into records")
    r.add_argument("--timm-dir", default="/work/shared/external/timm-gpu-benchmarks")
    r.add_argument("--neusight", default=str(ROOT.parent / "neusight-e2e"),
                   help="folder of NeuSight's labels.csv")
    r.add_argument("--out", default=str(ROOT))
    lam = sub.add_parser("lambda", help="Lambda's single-GPU training logs into records")
    lam.add_argument("--repo", required=True, help="git directory of a lambdal/deeplearning-benchmark clone")
    lam.add_argument("--out", default=str(ROOT / "lambda"))
    e = sub.add_parser("export", help="rebuild the timm architectures as structure-only ONNX")
    e.add_argument("--cache", required=True, help="folder of the ONNX files (not committed)")
    e.add_argument("--data", default=str(ROOT))
    e.add_argument("--log", help=f"export log (default {LOG})")
    e.add_argument("--timeout", type=float, default=900.0, help="seconds per export")
    e.add_argument("--mem-limit-mb", type=float, default=8000.0)
    e.add_argument("--max-params-m", type=float, default=ex.MAX_PARAMS_M)
    e.add_argument("--dynamo-share", type=float, default=ex.DYNAMO_SHARE)
    e.add_argument("--retry-failed", action="store_true")
    e.add_argument("--limit", type=int, help="stop after this many exports")
    e.add_argument("--only", nargs="+", help="only these timm model names")
    s = sub.add_parser("status", help="records and exports so far")
    s.add_argument("--data", default=str(ROOT))
    s.add_argument("--log", help=f"export log (default {LOG})")
    s.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    return {"records": _records, "lambda": _lambda, "export": _export, "status": _status}[args.cmd](args)
