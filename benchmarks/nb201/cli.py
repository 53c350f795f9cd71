"""Command line: ``python -m benchmarks.nb201 {fewshot,seernet}``.

Bad input prints one line, ``nb201: error: ...``, and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Sequence

from benchmarks.nb201 import fewshot
from benchmarks.nb201.fewshot_run import TEST, reference_order, run
from benchmarks.nb201.help_data import load_help
from training.byod.errors import ByodError

DEFAULT_CACHE = Path(__file__).resolve().parent / ".cache"  # git-ignored
CSV_HELP = "the HELP-format latency CSV: index, arch_str, <device>_ms ... (../shared/external/help-nb201/nb201_latency.csv)"  # noqa: E501 (a command line / table row / spec kept whole)


def _parser() -> argparse.ArgumentParser:
    from training.byod.cli import add_train_settings

    p = argparse.ArgumentParser(prog="python -m benchmarks.nb201",
                                description="NAS-Bench-201 latency benchmarks on HELP's data and protocol.")
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fewshot", help="a new device from 10 measurements -> fewshot.md, fewshot.json",
                       description="Pre-train on many devices, adapt each test device from k of its "
                                   "measurements; settings chosen on validation devices.")
    f.add_argument("--csv", required=True, help=CSV_HELP)
    f.add_argument("--out", default="reports/nb201", help="report folder (default reports/nb201)")
    f.add_argument("--test", nargs="+", default=list(TEST), help=f"test devices (default {' '.join(TEST)})")
    f.add_argument("--validation", nargs="+", default=None,
                   help="validation devices for choosing the adapter, each held out in turn and by kind "
                        "(default: every non-test device)")
    f.add_argument("--draws", type=int, default=10, help="random draws of the k samples (default 10)")
    f.add_argument("--cache", default=str(DEFAULT_CACHE), help="pre-training cache (default benchmarks/nb201/.cache)")

    r = sub.add_parser("reference", help="the NB201 cells to measure on a new device (the reference order)",
                       description="Pre-train on the CSV's devices (minus --exclude) and print the first k "
                                   "architectures of the reference order: measure these on the new device.")
    r.add_argument("--csv", required=True, help=CSV_HELP)
    r.add_argument("--k", type=int, default=10, help="how many architectures (default 10)")
    r.add_argument("--exclude", nargs="+", default=[], help="device columns not to learn from")
    r.add_argument("--json", action="store_true", help="print a JSON list of {index, cell}")
    r.add_argument("--cache", default=str(DEFAULT_CACHE), help="pre-training cache (default benchmarks/nb201/.cache)")

    n = sub.add_parser("seernet", help="SeerNet per device (900 samples), SeerNet-Multi few-shot, FLOPs",
                       description="Reproduce reports/nb201/README.md: per-device SeerNet at 900 samples, "
                                   "few-shot adaptation of a multi-device SeerNet, FLOPs baseline.")
    n.add_argument("--csv", required=True, help=CSV_HELP)
    n.add_argument("--out", default="reports/nb201", help="report folder (default reports/nb201)")
    n.add_argument("--devices", nargs="+", help="only these device columns (default: all)")
    n.add_argument("--batch", action="append", metavar="DEVICE=B",
                   help="batch size of a device that is not one of HELP's 19 (required for such a device; "
                        "repeatable), e.g. --batch edgetpu=1")
    n.add_argument("--held-out", nargs="+", help="devices held out of pre-training (default: "
                                                 "titanxp_1 gold_6240 pixel3 samsung_s7 titanxp_256)")
    n.add_argument("--parts", nargs="+", default=["flops", "single", "fewshot", "ablation"],
                   choices=["flops", "single", "fewshot", "ablation"],
                   help="what to run (default: all); ablation = SeerNet on the zoo's nb201 graphs for "
                        "--ablation-devices (default: the held-out devices)")
    n.add_argument("--ablation-devices", nargs="+", help="devices of the zoo-graph ablation")
    n.add_argument("--graphs", choices=["eager", "zoo"], default="eager",
                   help="eager: the networks as NAS-Bench-201's PyTorch code runs them (every edge, dead "
                        "nodes kept; default); zoo: the zoo's nb201 export (none edges and dead code removed)")
    n.add_argument("--export-device", action="append", default=[],
                   help="also ship the 900-sample predictor of this device to exported_models/nb201-<device>/")
    add_train_settings(n, 300)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = "python -m benchmarks.nb201 " + " ".join(
        shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:]))
    try:
        import torch

        torch.set_num_threads(1)
        if args.command == "fewshot":
            if args.draws < 1:
                raise ByodError("--draws must be at least 1")
            run(args.csv, Path(args.out), args.test, args.validation, args.draws, Path(args.cache), command)
            return 0
        if args.command == "reference":
            return _reference(args)
        from benchmarks.nb201.seernet import run_benchmark
        from training.byod.graphs import GraphCache
        from training.seernet.train import TrainConfig

        torch.set_num_threads(max(1, args.threads))
        cfg = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, early_stop=args.early_stop,
                          seed=args.seed, threads=args.threads, progress=not args.quiet)
        run_benchmark(args, cfg, GraphCache(args.cache), command)
        return 0
    except ByodError as exc:
        print(f"nb201: error: {exc}", file=sys.stderr)
        return 2


def _reference(args: argparse.Namespace) -> int:
    data = load_help(args.csv)
    unknown = [d for d in args.exclude if d not in data.latency]
    if unknown:
        raise ByodError(f"--exclude {' '.join(unknown)}: not a column of the CSV (it has {', '.join(data.devices)})")
    devices = [d for d in data.devices if d not in args.exclude]
    if len(devices) < 2:
        raise ByodError(f"{len(devices)} device columns left to learn from; the reference order needs 2 or more")
    if args.k < 1:
        raise ByodError("--k must be at least 1")
    z, _ = fewshot.pretrain(data, devices, fewshot.PretrainConfig(), Path(args.cache))
    idx = reference_order(data, devices, z[:, :len(devices)], max(args.k, 10), Path(args.cache))[0][:args.k]
    rows = [{"index": int(i), "cell": data.cells[i]} for i in idx]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"# measure these {len(rows)} NAS-Bench-201 cells on the new device "
              f"(chosen from {len(devices)} devices: {', '.join(devices)})")
        for i, row in enumerate(rows, 1):
            print(f"{i:3d}  {row['index']:5d}  {row['cell']}")
    return 0
