"""``python -m training.campaigns.gpu_window``: measure on a lent GPU, plan, ingest.

    run --out DIR [--budget-s 510 | --deadline EPOCH] [--device cuda|cpu] [--plan window|dry]
        [--families F,G] [--energy-window-s 1.0] [--inject SUBSTR=oom|error|fatal] [--limit N]
    plan [--plan window] [--budget-s 510] [--json]      the plan and its estimated cost on an H100
    table                                                recount the architectures' FLOPs / operators (CPU)
    ingest DIR [--data data/gpu] [--dry-run]             returned records -> data/gpu/<gpu>/<setup>/
    preflight [--slim | --restore]                       what the device call sends, and the command
    rebuilds --cache DIR [--data data/gpu]               structure-only ONNX of our hf / zoo records (CPU)

``run`` is what ``training/campaigns/gpu_window.sh`` starts on the GPU machine
(README.md in training/campaigns says how to call it). Bad arguments: one
line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from training.campaigns.gpu_window.measure import Timing
from training.campaigns.gpu_window.plan import PLANS, get_plan
from training.campaigns.gpu_window.watchdog import WATCHDOG_S

INJECT_KINDS = ("oom", "error", "fatal", "slow")


class UsageError(ValueError):
    """A bad command line (one line, exit 2)."""


def _inject(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        sub, _, kind = item.rpartition("=")
        if not sub or kind not in INJECT_KINDS:
            raise UsageError(f"--inject {item!r}: expected SUBSTRING=KIND with KIND one of "
                             f"{', '.join(INJECT_KINDS)}")
        out[sub] = kind
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m training.campaigns.gpu_window",
                                 description=(__doc__ or "").split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="measure the plan into --out until the deadline")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--budget-s", type=float, default=510.0, help="seconds from now (default 510)")
    r.add_argument("--deadline", type=float, help="time.time() after which nothing new starts "
                   "(the wrapper passes its own start + budget)")
    r.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    r.add_argument("--plan", choices=tuple(PLANS), default="window")
    r.add_argument("--families", help="only architectures of these families (comma list)")
    r.add_argument("--energy-window-s", type=float, default=Timing.window_s)
    r.add_argument("--inject", action="append", default=[], metavar="SUBSTR=KIND",
                   help="fail configurations whose key holds SUBSTR (oom | error | fatal), or slow one "
                   "step down (slow); for dry runs")
    r.add_argument("--limit", type=int, help="at most N new configurations")
    r.add_argument("--max-shard-mb", type=float, default=12.0)
    r.add_argument("--max-shards", type=int, default=4)
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("--watchdog-s", type=float, default=WATCHDOG_S,
                   help="a configuration running longer is recorded as hung and the process exits 3 "
                        "(default %(default)s)")
    p = sub.add_parser("plan", help="the plan and its estimated cost on an H100")
    p.add_argument("--plan", choices=tuple(PLANS), default="window")
    p.add_argument("--budget-s", type=float, default=510.0)
    p.add_argument("--json", action="store_true")
    i = sub.add_parser("ingest", help="returned records -> data/gpu/<gpu>/<setup>/records/")
    i.add_argument("src", type=Path, help="the folder the device call returned (files_at)")
    i.add_argument("--data", type=Path, default=None, help="destination root (default data/gpu)")
    i.add_argument("--dry-run", action="store_true", help="accept CPU dry-run records (tests only)")
    pf = sub.add_parser("preflight", help="what the device call sends, and the exact command")
    how = pf.add_mutually_exclusive_group()
    how.add_argument("--slim", action="store_true", help="leave data/ and exported_models/ out of the call "
                     "(git's index and .git/info/exclude; no file on disk is touched)")
    how.add_argument("--restore", action="store_true", help="undo --slim (run it right after the call)")
    sub.add_parser("table", help="recount arch_table.json (CPU; the cost estimate's input)")
    rb = sub.add_parser("rebuilds", help="structure-only ONNX of our hf / zoo records into --cache")
    rb.add_argument("--cache", type=Path, required=True)
    rb.add_argument("--data", type=Path, default=None, help="records root (default data/gpu)")
    return ap


def _run(a: argparse.Namespace) -> int:
    # lazy: each subcommand loads only its own step (the GPU machine runs `run` alone)
    from training.campaigns.gpu_window import runner

    if a.energy_window_s <= 0 or a.max_shards < 1 or a.max_shard_mb <= 0:
        raise UsageError("--energy-window-s, --max-shards and --max-shard-mb must be positive")
    plan = get_plan(a.plan)
    if a.families:
        fams = set(a.families.split(","))
        known = {c.arch.family for c in plan}
        if not fams <= known:
            raise UsageError(f"--families {a.families!r}: this plan has {', '.join(sorted(known))}")
        plan = [c for c in plan if c.arch.family in fams]
    deadline = a.deadline if a.deadline is not None else time.time() + a.budget_s
    opts = runner.RunOptions(
        out=a.out, deadline=deadline, device=a.device, plan=a.plan,
        timing=(Timing.dry() if a.plan == "dry" else
                Timing(window_s=a.energy_window_s, max_time_s=max(Timing.max_time_s, 2 * a.energy_window_s))),
        inject=_inject(a.inject), limit=a.limit, max_shard_bytes=int(a.max_shard_mb * 2**20),
        max_shards=a.max_shards, command=shlex.join(["python", "-m", "training.campaigns.gpu_window",
                                                     *sys.argv[1:]]),
        progress=not a.quiet, watchdog_s=a.watchdog_s)
    return runner.run(plan, opts, log=lambda m: print(m, flush=True))


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    a = ap.parse_args(argv)
    try:
        if a.cmd == "run":
            return _run(a)
        if a.cmd == "plan":
            # lazy: each subcommand loads only its own step (the GPU machine runs `run` alone)
            from training.campaigns.gpu_window import estimate

            summary = estimate.summarize(get_plan(a.plan), a.budget_s)
            print(json.dumps(summary, indent=1) if a.json else estimate.render(summary))
            return 0
        if a.cmd == "ingest":
            # lazy: each subcommand loads only its own step (the GPU machine runs `run` alone)
            from training.campaigns.gpu_window import ingest

            doc = ingest.ingest(a.src, a.data, allow_dry_run=a.dry_run)
            print(json.dumps(doc, indent=1))
            return 0
        if a.cmd == "rebuilds":
            # lazy: each subcommand loads only its own step (the GPU machine runs `run` alone)
            from training.campaigns.gpu_window import ingest, rebuilds

            data = a.data if a.data is not None else ingest.DATA
            if not data.is_dir():
                raise UsageError(f"--data {data}: no such folder (ingest a window first)")
            print(json.dumps(rebuilds.export_all(data, a.cache)))
            return 0
        if a.cmd == "table":
            # lazy: each subcommand loads only its own step (the GPU machine runs `run` alone)
            from training.campaigns.gpu_window import table

            return table.main()
        from training.campaigns.gpu_window import preflight

        if a.restore:
            preflight.restore()
            print("restored: data/ and exported_models/ are tracked again")
            return 0
        if a.slim:
            preflight.slim()
        return preflight.main()
    except (UsageError, ValueError, FileNotFoundError) as exc:
        print(f"gpu_window: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
