"""Command line: ``python -m training.byod {train,calibrate}``.

Errors in the input (:class:`~training.byod.errors.ByodError`) print one
line, ``byod: error: ...``, and exit with status 2; no traceback.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Sequence

import torch

from training.byod.calibrate_csv import calibrate_from_csv
from training.byod.errors import ByodError
from training.byod.graphs import GraphCache
from training.byod.train_csv import train_from_csv
from training.seernet.train import TrainConfig


def add_train_settings(p: argparse.ArgumentParser, epochs: int) -> None:
    p.add_argument("--epochs", type=int, default=epochs, help=f"at most this many epochs (default {epochs})")
    p.add_argument("--early-stop", type=int, default=30,
                   help="stop after this many epochs without validation improvement (default 30)")
    p.add_argument("--batch-size", type=int, default=128, help="graphs per step (default 128, paper)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--cache", help="graph cache folder (default training/byod/.cache, git-ignored)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.byod",
                                description="Bring your own device: a predictor from a CSV of measurements. "
                                            "(The NAS-Bench-201 benchmark: python -m benchmarks.nb201.)")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="CSV of measurements -> exported_models/<device>/",
                       description="Train SeerNet for one device from a CSV of measurements and export "
                                   "it (ONNX + manifest.json + report.md).")
    t.add_argument("--csv", required=True, help="the measurements (header line, one row per configuration)")
    t.add_argument("--model-column", required=True,
                   help="column with an ONNX path (relative to the CSV) or a zoo spec (nb201:<cell>, "
                        "resnet:depth=50,...) per row")
    t.add_argument("--model-format", default="{}",
                   help="turn each model cell into a spec, e.g. 'nb201:{}' for a column of bare NAS-Bench-201 "
                        "cell strings (default '{}': as is)")
    g = t.add_mutually_exclusive_group()
    g.add_argument("--batch-column", help="column with the batch size of each row")
    g.add_argument("--batch", type=int, help="batch size of every row (default 1)")
    t.add_argument("--metric", action="append", required=True, metavar="COL",
                   help="metric column, ending in its unit (latency_ms, peak_mem_mb, energy_mj); repeatable")
    t.add_argument("--device", required=True, help="device name of the predictor")
    t.add_argument("--description", help="words describing the device (for the manifest)")
    t.add_argument("--train-rows", help="training rows, e.g. 1-900 (rows count from 1 after the header)")
    t.add_argument("--test-rows", help="test rows, e.g. 901-1900")
    t.add_argument("--out", help="output folder (default exported_models/<device>)")
    t.add_argument("--json", action="store_true", help="print the accuracy as JSON")
    add_train_settings(t, 500)


    c = sub.add_parser("calibrate", help="CSV of 10+ measured models + a base device -> a calibrated device entry",
                       description="Correct a shipped device's predictor with 10 or more measurements of a new "
                                   "device (no training; seconds); reports the leave-one-out error. The entry "
                                   "is what `perfseer-rt calibrate` writes: `perfseer-rt predict --device NAME`.")
    c.add_argument("--csv", required=True, help="the measurements (header line, one row per model)")
    c.add_argument("--model-column", required=True,
                   help="column with an ONNX path (relative to the CSV) or a zoo spec per row")
    c.add_argument("--model-format", default="{}",
                   help="turn each model cell into a spec, e.g. 'nb201:{}' for bare NAS-Bench-201 cells")
    g = c.add_mutually_exclusive_group()
    g.add_argument("--batch-column", help="column with the batch size of each row")
    g.add_argument("--batch", type=int, help="batch size of every row (default 1)")
    c.add_argument("--metric", action="append", required=True, metavar="COL",
                   help="metric column named as the base predicts it (latency_ms, peak_mem_mb); repeatable")
    c.add_argument("--base", default="cpu-amd-epyc-1t", help="shipped device to correct (default cpu-amd-epyc-1t)")
    c.add_argument("--device", required=True, help="name of the new device entry")
    c.add_argument("--description", help="words describing the device")
    c.add_argument("--out", help="entry folder (default: the user data dir perfseer-rt predict reads, "
                                 "$PERFSEER_RT_HOME/devices/<device> or ~/.local/share/perfseer-rt/devices/<device>)")
    c.add_argument("--force", action="store_true", help="replace an existing entry")
    c.add_argument("--cache", help="graph cache folder (default training/byod/.cache, git-ignored)")
    c.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = "python -m training.byod " + " ".join(
        shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:]))
    try:
        torch.set_num_threads(max(1, getattr(args, "threads", 1)))
        cfg = None if args.command == "calibrate" else TrainConfig(
            epochs=args.epochs, batch_size=args.batch_size, early_stop=args.early_stop, seed=args.seed,
            threads=args.threads, progress=not args.quiet)
        cache = GraphCache(args.cache)
        if args.command == "calibrate":
            return _calibrate(args, cache)
        return _train(args, cfg, cache, command)
    except ByodError as exc:
        print(f"byod: error: {exc}", file=sys.stderr)
        return 2


def _train(args, cfg, cache, command: str) -> int:
    res = train_from_csv(args.csv, args.model_column, args.metric, args.device,
                         batch_column=args.batch_column, batch=args.batch, train_rows=args.train_rows,
                         test_rows=args.test_rows, out=args.out, cfg=cfg, cache=cache,
                         model_format=args.model_format,
                         description=args.description, command=command)
    if args.json:
        print(json.dumps({"out": str(res.out), "accuracy": res.accuracy, "seconds": res.seconds}, indent=1))
    else:
        for m, s in res.accuracy.items():
            print(f"{m}: test MAPE {s['mape']:.2f} %, within +-10 % {s['within_10']:.1f} %, "
                  f"Spearman {s['spearman'] if s['spearman'] is not None else float('nan'):.3f} "
                  f"({s['count']} rows)")
        print(f"wrote {res.out}/seernet.onnx, manifest.json, report.md "
              f"({res.seconds['total']:.0f} s)")
    return 0


def _calibrate(args, cache) -> int:
    res = calibrate_from_csv(args.csv, args.model_column, args.metric, args.device, args.base,
                             batch_column=args.batch_column, batch=args.batch, model_format=args.model_format,
                             out=args.out, overwrite=args.force, cache=cache, description=args.description)
    if args.json:
        print(json.dumps({"device": res.device, "folder": str(res.folder), "base": res.base,
                          "corrections": {m: c.to_dict() for m, c in res.corrections.items()}}, indent=1))
        return 0
    for m, c in res.corrections.items():
        print(f"{m}: leave-one-out MAPE {c.cv_mape:.2f} %, within +-10 % {c.cv_within_10:.1f} % "
              f"({c.count} models; base {res.base} uncorrected {c.base_mape:.2f} %)")
    print(f"wrote {res.folder} (perfseer-rt predict MODEL --device {res.device})")
    return 0
