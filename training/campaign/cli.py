"""``python -m training.campaign``: run (or resume) a measurement campaign.

    python -m training.campaign --target cpu-inference --out data/cpu-amd-epyc-1t/inference \\
        --configs 2400 --device cpu-amd-epyc-1t --min-time 0.25 --max-latency 600
    python -m training.campaign --target cuda-inference --out $OUT/inference --count 4000 \\
        --time-budget 540 --resume data/gpu
    python -m training.campaign --target cuda-train --dry-run --out /tmp/dry --count 2

The same folder resumes where it stopped; records train a predictor with
``python -m training.seernet.report --dataset DIR ...``. ``--ray N`` runs N
device workers on Ray (``--ray-address`` for a cluster); without it no Ray is
imported.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

import torch

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.profile import PRESETS, MeasureSettings, check_cuda, environment
from training.campaign import loop
from training.campaign.plan import GPU_BATCHES, REFERENCE_SPECS, CpuPlan, FixedPlan
from training.campaign.store import MixedCpuError, MixedMethodsError, Store
from training.campaign.targets import DRY_SETTINGS, TARGETS, TargetSpec
from training.campaign.worker import DeviceWorker
from training.campaign.zoo_cases import ZOO_ENV
from training.campaigns.check_cuda import main as check_cuda_main


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.campaign",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--target", choices=sorted(TARGETS), default="cpu-inference")
    p.add_argument("--out", required=True, help="dataset folder (created or resumed)")
    p.add_argument("--resume", action="append", default=[], metavar="PATH",
                   help="dataset folders (or parents of them) whose configurations are done "
                        "(repeatable; --out is always read)")
    p.add_argument("--configs", type=int, default=None,
                   help="stop once the folder holds this many configurations "
                        "(default: 3000 for the CPU plan, the whole plan for the fixed one)")
    p.add_argument("--plan", choices=["cpu", "fixed"], default=None,
                   help="cpu: endless stream, batches picked from a batch-1 probe; fixed: --count "
                        "architectures at --batches-per-arch sizes (default: cpu for cpu-*, "
                        "fixed for cuda-*)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--families", default=None, help="comma-separated subset of families")
    p.add_argument("--per-arch", type=int, default=3, help="cpu plan: batch sizes per architecture")
    p.add_argument("--max-latency", type=float, default=1000.0,
                   help="cpu plan: batch sizes are chosen to stay under this latency, ms")
    p.add_argument("--count", type=int, default=2000, help="fixed plan: architectures")
    p.add_argument("--batches", default=",".join(map(str, GPU_BATCHES)),
                   help="fixed plan: batch sizes to draw from")
    p.add_argument("--batches-per-arch", type=int, default=3)
    p.add_argument("--spec", action="append", default=[], help="fixed plan: zoo spec measured first")
    p.add_argument("--reference-count", type=int, default=3,
                   help="fixed plan: first architectures re-measured as the reference set")
    p.add_argument("--device", default=None,
                   help="device name of every record (default: cpu-<threads>t, or the GPU's name)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--min-time", type=float, default=None, help="least timed window, s")
    p.add_argument("--min-runs", type=int, default=None, help="least timed runs")
    p.add_argument("--max-time", type=float, default=None, help="stop timing after this, s")
    p.add_argument("--warmup-runs", type=int, default=None)
    p.add_argument("--noisy-cv", type=float, default=0.03, help="re-measure above this robust CV")
    p.add_argument("--reference-every", type=int, default=100)
    p.add_argument("--no-reference", action="store_true", help="no reference re-measures")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="start nothing new after this many seconds")
    p.add_argument("--shard-size", type=int, default=200)
    p.add_argument("--conv-algo", default="EXHAUSTIVE", choices=["EXHAUSTIVE", "HEURISTIC", "DEFAULT"])
    p.add_argument("--tf32", type=int, default=1, choices=[0, 1])
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--builder", default=None, help="train: module:function (config, batch)")
    p.add_argument("--zoo", default=None, help="zoo module (tests use a stand-in)")
    p.add_argument("--dry-run", action="store_true",
                   help="run a cuda-* target on the CPU with tiny budgets (no GPU needed)")
    p.add_argument("--check-cuda", action="store_true",
                   help="only prove CUDAExecutionProvider runs, write check_cuda.json to --out")
    p.add_argument("--ray", type=int, default=0, metavar="N", help="N device workers on Ray")
    p.add_argument("--ray-address", default=None, help="Ray cluster address (default: local)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def measure_settings(a: argparse.Namespace) -> MeasureSettings:
    """Per target: CPU 5 runs / 0.4 s; CUDA 10 runs / 1 s window (NVML, energy)."""
    if a.dry_run:
        base = DRY_SETTINGS
    elif TARGETS[a.target][1] == "cuda":
        base = PRESETS["campaign-cuda-inference" if a.target == "cuda-inference" else "campaign-cuda-train"]
    else:
        base = PRESETS["campaign-cpu"]
    d = base.to_dict()
    for key, value in (("min_time_s", a.min_time), ("min_runs", a.min_runs),
                       ("max_time_s", a.max_time), ("warmup_runs", a.warmup_runs)):
        if value is not None:
            d[key] = value
    d["max_time_s"] = max(d["max_time_s"], d["min_time_s"])
    return MeasureSettings.from_dict(d)


def device_name(a: argparse.Namespace) -> str:
    """``--device``, else the GPU's name as a slug, else ``cpu-<threads>t``."""
    if a.device:
        return a.device
    if TARGETS[a.target][1] == "cuda" and not a.dry_run:
        gpu = environment().get("gpu_name")
        if gpu:
            return re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")
    return f"cpu-{a.threads}t" + ("-dry-run" if a.dry_run else "")


def make_plan(a: argparse.Namespace):
    families = [f for f in (a.families or "").split(",") if f] or None
    kind = a.plan or ("cpu" if TARGETS[a.target][1] == "cpu" else "fixed")
    if kind == "cpu":
        return CpuPlan(a.seed, families, a.per_arch, a.max_latency, REFERENCE_SPECS)
    return FixedPlan(a.seed, a.count, families, [int(b) for b in a.batches.split(",") if b],
                     a.batches_per_arch, specs=a.spec, reference_count=a.reference_count)


class WorkerFactory:
    """Builds one device's worker (picklable: Ray sends it to each actor)."""

    def __init__(self, spec: TargetSpec, noisy_cv: float, zoo: str | None):
        self.spec, self.noisy_cv, self.zoo = spec, noisy_cv, zoo

    def __call__(self, index: int) -> DeviceWorker:
        return DeviceWorker(self.spec, self.noisy_cv, self.zoo, device_id=0)


def main(argv: Sequence[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.zoo:  # the plan, the export process and the training child all read it
        os.environ[ZOO_ENV] = a.zoo
    if a.check_cuda:
        return check_cuda_main(a.out)
    on_gpu = TARGETS[a.target][1] == "cuda" and not a.dry_run
    if on_gpu and a.target == "cuda-inference":
        try:
            check_cuda()
        except PerfSeerError as exc:
            print(f"campaign: error: {exc}", file=sys.stderr)
            return 2
    if on_gpu and a.target == "cuda-train":
        if not torch.cuda.is_available():
            print("campaign: error: torch sees no CUDA device; use --dry-run on a CPU machine",
                  file=sys.stderr)
            return 2
    settings = measure_settings(a)
    spec = TargetSpec(a.target, settings.to_dict(), threads=a.threads, device_name=device_name(a),
                      dry_run=a.dry_run, optimizer=a.optimizer, lr=a.lr, builder=a.builder,
                      provider_options={"cudnn_conv_algo_search": a.conv_algo, "use_tf32": a.tf32})
    try:
        plan = make_plan(a)
        planned = [] if isinstance(plan, CpuPlan) else \
            [(it.arch_id, b) for it in plan.items() for b in it.batches or ()]
    except (ValueError, KeyError) as exc:  # a bad --spec / --families value: nothing written
        print(f"campaign: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    store = Store(a.out, a.resume, a.shard_size)
    configs = a.configs if a.configs is not None else (
        3000 if isinstance(plan, CpuPlan) else
        store.count + sum(not store.is_done(*p) for p in set(planned)))
    factory = WorkerFactory(spec, a.noisy_cv, a.zoo)
    if a.ray:
        # lazy: Ray is optional and heavy; only the distributed path imports it
        import ray

        from training.campaign.distributed import RayExecutor  # lazy: imports ray

        root = str(Path(__file__).resolve().parents[2])  # the repository: workers import training/
        runtime_env = ({"working_dir": root, "excludes": ["data", ".venv", ".whl", "reports"]}
                       if a.ray_address else
                       {"env_vars": {"PYTHONPATH": os.pathsep.join(
                           filter(None, [root, os.environ.get("PYTHONPATH")]))}})
        ray.init(address=a.ray_address, include_dashboard=False, ignore_reinit_error=True,
                 runtime_env=runtime_env)
        executor: loop.Executor = RayExecutor(factory, a.ray, num_gpus=1 if on_gpu else 0)
    else:
        executor = loop.LocalExecutor(factory(0))
    record = {"target": a.target, "measure_settings": settings.to_dict(),
              "target_spec": asdict(spec), "plan": plan.describe(), "configs": configs,
              "reference_every": a.reference_every, "time_budget_s": a.time_budget,
              "noisy_cv": a.noisy_cv, "ray_workers": a.ray, "device": spec.device_name}
    try:
        stats = loop.run(plan, store, executor, target=configs, reference=not a.no_reference,
                         reference_every=a.reference_every, time_budget_s=a.time_budget,
                         settings=record, progress=not a.quiet)
    except (MixedMethodsError, MixedCpuError) as exc:
        print(f"campaign: error: {exc}", file=sys.stderr)
        return 2
    print(f"{store.count} configurations in {a.out} (+{stats.written - stats.references} new, "
          f"{stats.references} reference re-measures"
          f"{', stopped by the time budget' if stats.stopped_by_budget else ''})")
    return 0
