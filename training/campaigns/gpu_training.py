"""GPU campaign 2 (issue 7): training-step labels for zoo models with torch on CUDA.

Pipeline: the same deterministic plan as the inference campaign (PerfSeer
space at 224x224, classic families, transformers; batch sizes from 1..256)
-> one optimizer step (forward, loss, backward, SGD update) measured by
:class:`training.profile_train.TrainWorker` in a child process: CUDA-event
step time (median, CV), NVML process peak memory and torch's peak
allocated/reserved, NVML utilization, GPM SM activity, energy per step ->
one JSON line per record in ``--out``, flushed per record.

Usage (README.md in this folder has the GPU machine's exact commands)::

    python -m training.campaigns.gpu_training --out $OUT --time-budget 540
    python -m training.campaigns.gpu_training --dry-run --out /tmp/dry    # CPU

Each record: the training-step record (training.profile_train.TRAIN_FIELDS)
plus ``campaign, run_id, seq, key, arch_id, family, batch, config, spec,
device, settings, reference, remeasured, first_cv, noisy, metrics, quality``.
"""

from __future__ import annotations

import argparse
import os
import sys

from training.campaigns import common
from training.campaigns.zoo_cases import ZOO_ENV

CAMPAIGN = "gpu_training"
METRICS = ("step_ms", "peak_mem_mb", "sm_util_pct", "gpm_sm_active_pct", "energy_mj")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m training.campaigns.gpu_training",
                                description=__doc__.split("\n\n")[0])
    common.add_common_args(p)
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--window", type=float, default=1.0,
                   help="least timed window per record, s (NVML utilization, energy)")
    p.add_argument("--min-runs", type=int, default=10)
    p.add_argument("--max-time", type=float, default=4.0,
                   help="stop timing a slow model after this many seconds (>= 3 steps)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (CPU dry run)")
    p.add_argument("--builder", default=None,
                   help="module:function (config, batch) -> (module, inputs); default zoo")
    return p.parse_args(argv)


def measure_settings(args):
    from perfseer_rt.profile import MeasureSettings

    if args.dry_run:
        return MeasureSettings(min_runs=3, min_time_s=0.02, max_time_s=1.0, warmup_runs=1,
                               warmup_time_s=0.0)
    return MeasureSettings(min_runs=args.min_runs, min_time_s=args.window,
                           max_time_s=max(args.max_time, args.window), warmup_runs=3,
                           warmup_time_s=0.3)


def main(argv=None) -> int:
    args = parse_args(argv)
    from perfseer_rt.profile.env import environment
    from training.profile_train import TrainWorker, finish_train_record, torch_env

    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("gpu_training: error: torch sees no CUDA device; use --dry-run on a CPU "
                  "machine", file=sys.stderr)
            return 2
    os.environ[ZOO_ENV] = args.zoo
    settings = measure_settings(args)
    zoo = common.load_zoo(args.zoo)
    try:
        archs = common.plan_archs(zoo, seed=args.seed, count=args.count,
                                  families=common.parse_list(args.families) or None,
                                  batches=common.parse_list(args.batches, int),
                                  batches_per_arch=args.batches_per_arch, specs=args.spec)
    except Exception as exc:  # a bad --spec or --families value
        print(f"gpu_training: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    done = common.load_done([args.out, *filter(None, args.resume)], CAMPAIGN,
                            args.retry_errors)
    writer = common.RecordWriter(args.out, "training")
    logf = open(os.path.join(args.out, f"training-{writer.stamp}.log"), "a")
    budget = common.Budget(args.time_budget, floor_s=1.0 if args.dry_run else 8.0)
    env = environment(**torch_env())
    slug = common.device_slug(env, "cuda" if device == "cuda" else "cpu", args.threads)
    common.log(f"{CAMPAIGN}: {len(archs)} architectures, {sum(len(a.cases) for a in archs)} "
               f"cases planned, {len(done)} already done; device {slug}; out {writer.path}",
               logf)
    worker = TrainWorker(device, timeout_s=600)
    seq = [0]

    def measure(case, prepared, timeout):
        return worker.measure(case.config, case.batch, builder=args.builder,
                              optimizer=args.optimizer, lr=args.lr, settings=settings,
                              threads=args.threads if device == "cpu" else None,
                              timeout_s=timeout)

    def finish(rec, case):
        seq[0] += 1
        rec.update(campaign=CAMPAIGN, run_id=writer.stamp, seq=seq[0], key=case.key,
                   arch_id=case.arch_id, family=case.family, batch=case.batch,
                   config=case.config, spec=case.spec, device=slug, device_index=rec.get("device"),
                   settings=settings.to_dict())
        rec["metrics"] = {k: rec.get(k) for k in METRICS} if rec.get("status") == "ok" else {}
        rec["quality"] = {k: rec.get(k) for k in ("step_cv", "step_robust_cv", "runs", "window_s",
                                                  "noisy", "remeasured", "reference")}
        return finish_train_record(rec)

    try:
        stats = common.run_campaign(
            archs, campaign=CAMPAIGN, measure=measure, prepare=lambda i: None,
            release=lambda i, keep: None, finish=finish, writer=writer, budget=budget,
            done=done, reference_count=args.reference_count,
            reference_every=args.reference_every, cv_key="step_cv", cv_max=args.cv_max,
            logf=logf)
    finally:
        worker.close()
        writer.close()
    common.report_summary(CAMPAIGN, stats, budget, writer, slug, logf)
    logf.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
