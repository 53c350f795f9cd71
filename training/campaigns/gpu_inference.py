"""GPU campaign 1 (issue 6): onnxruntime CUDA inference labels for zoo models.

Pipeline: a deterministic plan of zoo architectures (PerfSeer space at
224x224, classic families, transformers; batch sizes drawn from 1..256) ->
ONNX export with weights in a pool of worker processes, running ahead of the
GPU -> measurement with :class:`perfseer_rt.profile.ProfileWorker` on the
CUDA provider (IO binding, latency median and CV, NVML peak memory,
utilization, GPM SM activity, energy) -> one JSON line per record in
``--out``, flushed per record.

Usage (README.md in this folder has the GPU machine's exact commands)::

    python -m training.campaigns.gpu_inference --check-cuda --out $OUT
    python -m training.campaigns.gpu_inference --out $OUT --time-budget 540 \\
        --resume .campaign/inference
    python -m training.campaigns.gpu_inference --dry-run --out /tmp/dry   # CPU

Each record: the profile record (see perfseer_rt.profile.record) plus
``campaign, run_id, seq, key, arch_id, family, batch, config, spec, device,
stage, export_s, onnx_bytes, settings, reference, remeasured, first_cv,
noisy, metrics, quality``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from training.campaigns import common
from training.campaigns.zoo_cases import ZOO_ENV, export_case, export_worker_init

CAMPAIGN = "gpu_inference"
METRICS = ("latency_ms", "peak_mem_mb", "sm_util_pct", "gpm_sm_active_pct", "energy_mj")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m training.campaigns.gpu_inference",
                                description=__doc__.split("\n\n")[0])
    common.add_common_args(p)
    p.add_argument("--check-cuda", action="store_true",
                   help="only prove CUDAExecutionProvider runs, print versions, and exit")
    p.add_argument("--export-workers", type=int, default=None,
                   help="ONNX export processes (default: cores - 4, at least 1)")
    p.add_argument("--lookahead", type=int, default=None,
                   help="architectures exported ahead of the GPU (default 2 x workers)")
    p.add_argument("--window", type=float, default=1.0,
                   help="least timed window per record, s (NVML utilization, energy)")
    p.add_argument("--min-runs", type=int, default=10)
    p.add_argument("--max-time", type=float, default=4.0,
                   help="stop timing a slow model after this many seconds (>= 3 runs)")
    p.add_argument("--conv-algo", default="EXHAUSTIVE",
                   choices=["EXHAUSTIVE", "HEURISTIC", "DEFAULT"])
    p.add_argument("--tf32", type=int, default=1, choices=[0, 1])
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (CPU dry run)")
    return p.parse_args(argv)


def measure_settings(args):
    from perfseer_rt.profile import MeasureSettings

    if args.dry_run:
        return MeasureSettings(min_runs=3, min_time_s=0.02, max_time_s=1.0, warmup_runs=1,
                               warmup_time_s=0.0)
    return MeasureSettings(min_runs=args.min_runs, min_time_s=args.window,
                           max_time_s=max(args.max_time, args.window), warmup_runs=5,
                           warmup_time_s=0.3)


class ExportPool:
    """ONNX exports in worker processes, submitted ahead of the measurement."""

    def __init__(self, archs, needed: list[int], workers: int, lookahead: int, zoo: str,
                 tmpdir: str) -> None:
        self.archs, self.needed, self.zoo, self.tmpdir = archs, needed, zoo, tmpdir
        self.lookahead = lookahead
        self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                        initializer=export_worker_init)
        self.futures: dict[int, Future] = {}
        self._pos = {i: n for n, i in enumerate(needed)}

    def _submit(self, i: int) -> None:
        if i in self.futures:
            return
        arch = self.archs[i]
        path = os.path.join(self.tmpdir, f"{arch.arch_id}.onnx")
        self.futures[i] = self.pool.submit(export_case, json.dumps(arch.config), path, self.zoo)

    def get(self, i: int, timeout: float):
        """Wait for architecture ``i``'s export: its result, a failure record, or STOP."""
        from perfseer_rt.profile.record import failure_record

        start = self._pos.get(i, 0)
        for j in self.needed[start:start + self.lookahead + 1]:
            self._submit(j)
        self._submit(i)
        try:
            res = self.futures[i].result(timeout=timeout if timeout < 1e9 else None)
        except FutureTimeout:
            return common.STOP  # the command's time ran out while the export ran
        except Exception as exc:  # exporter error, worker crash
            msg = f"export failed: {type(exc).__name__}: {exc}"
            rec = failure_record(msg, status="error")
            rec["stage"] = "export"
            return rec
        return res

    def release(self, i: int) -> None:
        fut = self.futures.pop(i, None)
        if fut is not None and fut.done() and not fut.cancelled() and not fut.exception():
            path = fut.result()["path"]
            for p in (path, path + ".data"):
                if os.path.exists(p):
                    os.unlink(p)

    def close(self) -> None:
        """Cancel pending exports and stop the export processes (this pool's own)."""
        procs = list((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(5)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.check_cuda:
        from training.campaigns.check_cuda import main as check_main

        return check_main(args.out)

    from perfseer_rt.errors import PerfSeerError
    from perfseer_rt.profile import ProfileWorker, check_cuda, finish_record
    from perfseer_rt.profile.env import environment

    provider = "cpu" if args.dry_run else "cuda"
    if provider == "cuda":
        try:
            check_cuda()
        except PerfSeerError as exc:
            print(f"gpu_inference: error: {exc}", file=sys.stderr)
            return 2
    os.environ[ZOO_ENV] = args.zoo
    settings = measure_settings(args)
    options = {"cudnn_conv_algo_search": args.conv_algo, "use_tf32": args.tf32}
    zoo = common.load_zoo(args.zoo)
    batches = common.parse_list(args.batches, int)
    try:
        archs = common.plan_archs(zoo, seed=args.seed, count=args.count,
                                  families=common.parse_list(args.families) or None,
                                  batches=batches, batches_per_arch=args.batches_per_arch,
                                  specs=args.spec)
    except Exception as exc:  # a bad --spec or --families value
        print(f"gpu_inference: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    done = common.load_done([args.out, *filter(None, args.resume)], CAMPAIGN,
                            args.retry_errors)
    writer = common.RecordWriter(args.out, "inference")
    logf = open(os.path.join(args.out, f"inference-{writer.stamp}.log"), "a")
    budget = common.Budget(args.time_budget, floor_s=1.0 if args.dry_run else 8.0)
    env = environment()
    device = common.device_slug(env, provider, args.threads)
    common.log(f"{CAMPAIGN}: {len(archs)} architectures, {sum(len(a.cases) for a in archs)} "
               f"cases planned, {len(done)} already done; device {device}; out {writer.path}",
               logf)
    needed = [i for i, a in enumerate(archs)
              if i < args.reference_count or any(c.key not in done for c in a.cases)]
    workers = args.export_workers or max(1, (os.cpu_count() or 2) - 4)
    tmpdir = tempfile.mkdtemp(prefix="perfseer-export-")
    exports = ExportPool(archs, needed, 1 if args.dry_run else workers,
                         args.lookahead or 2 * workers, args.zoo, tmpdir)
    worker = ProfileWorker(provider, timeout_s=600)
    seq = [0]

    def measure(case, prepared, timeout):
        rec = worker.measure(prepared["path"], batch=case.batch, settings=settings,
                             provider_options=options if provider == "cuda" else None,
                             threads=args.threads, timeout_s=timeout)
        rec["stage"] = "measure"
        rec["export_s"] = prepared.get("export_s")
        rec["onnx_bytes"] = prepared.get("onnx_bytes")
        return rec

    def finish(rec, case):
        seq[0] += 1
        rec.update(campaign=CAMPAIGN, run_id=writer.stamp, seq=seq[0], key=case.key,
                   arch_id=case.arch_id, family=case.family, batch=case.batch,
                   config=case.config, spec=case.spec, device=device, model=case.spec,
                   settings=settings.to_dict())
        if rec.get("provider_requested") is None:
            rec["provider_requested"] = ("CUDAExecutionProvider" if provider == "cuda"
                                         else "CPUExecutionProvider")
        rec["metrics"] = {k: rec.get(k) for k in METRICS} if rec.get("status") == "ok" else {}
        rec["quality"] = {k: rec.get(k) for k in ("latency_cv", "latency_robust_cv", "runs",
                                                  "window_s", "noisy", "remeasured",
                                                  "reference")}
        return finish_record(rec)

    try:
        stats = common.run_campaign(
            archs, campaign=CAMPAIGN, measure=measure,
            prepare=lambda i: exports.get(i, timeout=max(0.1, budget.left() - 10.0)),
            release=lambda i, keep: exports.release(i), finish=finish, writer=writer,
            budget=budget, done=done, reference_count=args.reference_count,
            reference_every=args.reference_every, cv_key="latency_cv", cv_max=args.cv_max,
            logf=logf)
    except PerfSeerError as exc:
        common.log(f"{CAMPAIGN}: error: {exc}", logf)
        return 2
    finally:
        worker.close()
        exports.close()
        shutil.rmtree(tmpdir, ignore_errors=True)
        writer.close()
    common.report_summary(CAMPAIGN, stats, budget, writer, device, logf)
    logf.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
