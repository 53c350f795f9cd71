"""One device's work on one architecture: export -> extract -> measure -> records.

A :class:`DeviceWorker` owns a target (its measuring child) and an export
process that runs one architecture ahead of the measurement. For each
:class:`~training.campaign.plan.Item` it returns ``[(record, graph)]``:

- every batch size gets one record, successful or not, and (when
  extraction worked) its PerfGraph, keyed ``<family>/<arch_id>/b<batch>``;
- a record whose robust CV is above ``noisy_cv`` is re-measured once (the
  steadier one is kept, ``quality.remeasured``) and flagged
  ``quality.noisy`` if it stays noisy;
- out of memory is a label: ``status: "oom"``; the larger batch sizes of
  the architecture are then not run and recorded as ``"oom"`` too
  (``quality.oom_masked_by``: the batch that ran out);
- a probe item (``batches`` None) measures batch 1 and picks more from it.

The worker is plain Python; the loop runs it in-process or as a Ray actor.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import tempfile
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from perfseer_rt import extract
from training.campaign.plan import Item
from training.campaign.probe import speed_probe
from training.campaign.targets import METRICS, TIME, Target, TargetSpec
from training.campaign.zoo_cases import ZOO_ENV, export_case, export_worker_init
from training.dataset.plan import pick_batches
from training.dataset.splits import split_arch, split_family, split_real

#: Quality fields copied from the measurement (``<t>`` is the time field).
QUALITY = ("{t}_cv", "{t}_robust_cv", "runs", "window_s", "warmup_runs", "{t}_min_ms",
           "{t}_mean_ms", "{t}_p90_ms", "peak_mem_method", "session_ms", "load_peak_mb",
           "loaded_mb", "run_peak_mb", "build_ms",
           "optimizer", "torch_max_allocated_mb", "torch_max_reserved_mb", "power_w",
           "proc_sm_util_pct", "gpm_sm_occupancy_pct", "peak_mem_process_mb", "speed_probe_ms")


def graph_key(family: str, arch_id: str, batch: int) -> str:
    """The stable key naming a record's PerfGraph in the store's shards."""
    return f"{family}/{arch_id}/b{batch}"


class DeviceWorker:
    """Measures items on one device (see module doc).

    Args:
        spec: the target to build.
        noisy_cv: re-measure threshold on the robust CV.
        zoo: the zoo module name (tests use a stand-in), set in the export
            process and the training child.
        device_id: the GPU index.
    """

    def __init__(self, spec: TargetSpec, noisy_cv: float = 0.03, zoo: str | None = None,
                 device_id: int = 0):
        if zoo:
            os.environ[ZOO_ENV] = zoo
        self.spec, self.noisy_cv, self.zoo = spec, noisy_cv, zoo
        self.target = Target(spec, device_id)
        self.tmp = Path(tempfile.mkdtemp(prefix="psrt-campaign-"))
        self._pool = self._new_pool()
        self._exports: dict[str, Future] = {}
        self._keep: set[str] = set()

    # ------------------------------------------------------------ exports
    @staticmethod
    def _new_pool() -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=export_worker_init)

    def _restart_pool(self) -> None:
        """A fresh export process; exports queued in the dead one are forgotten."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = self._new_pool()
        self._exports.clear()

    def prefetch(self, item: Item | None) -> None:
        """Start exporting ``item`` (the next one) while this one is measured."""
        if item is not None and item.arch_id not in self._exports:
            path = str(self.tmp / f"{item.arch_id}.onnx")
            args = (json.dumps(item.config), path, self.zoo)
            try:
                self._exports[item.arch_id] = self._pool.submit(export_case, *args)
            except BrokenProcessPool:  # an earlier export killed the process
                self._restart_pool()
                self._exports[item.arch_id] = self._pool.submit(export_case, *args)

    def _export(self, item: Item) -> str:
        self.prefetch(item)
        try:
            return self._exports[item.arch_id].result()["path"]
        except BrokenProcessPool:
            # the export process died (a crash in the exporter, or the OS killed it):
            # try this item once more in a fresh process; dying again is its own
            # export error, recorded by the caller, and the campaign goes on
            self._restart_pool()
            self.prefetch(item)
            try:
                return self._exports[item.arch_id].result()["path"]
            except BrokenProcessPool:
                self._restart_pool()
                raise RuntimeError("the export process died twice on this architecture") from None

    def _drop_export(self, arch_id: str) -> None:
        self._exports.pop(arch_id, None)
        for p in self.tmp.glob(f"{arch_id}*"):
            p.unlink(missing_ok=True)

    # ---------------------------------------------------------- measuring
    def _measure(self, path: str, item: Item, batch: int, deadline: float | None) -> dict:
        t = TIME[self.target.kind]
        timeout = self.spec.timeout_s
        if deadline is not None:
            timeout = max(5.0, min(timeout, deadline - time.time()))
        before = speed_probe()
        rec = self.target.measure(path, item.config, batch, timeout)
        cv = rec.get(f"{t}_robust_cv")
        if rec.get("status") == "ok" and cv is not None and cv > self.noisy_cv:
            again = self.target.measure(path, item.config, batch, timeout)
            again_cv = again.get(f"{t}_robust_cv")
            if again.get("status") == "ok" and again_cv is not None and again_cv < cv:
                rec = again
            rec["remeasured"] = True
        rec["speed_probe_ms"] = (before + speed_probe()) / 2  # the core's speed around it (probe.py)
        return rec

    def run(self, item: Item, upcoming: Item | None = None,
            deadline: float | None = None) -> list[tuple[dict, Any]]:
        """Measure one item; ``upcoming`` is exported meanwhile. Stops between
        batch sizes once ``deadline`` (``time.time()``) has passed."""
        out: list[tuple[dict, Any]] = []
        try:
            path = self._export(item)
        except Exception as exc:  # noqa: BLE001 - an unexportable config is a recorded failure
            self.prefetch(upcoming)
            self._drop_export(item.arch_id)
            return [(self._record(item, b, {"status": "error", "error": f"export: {exc}"}, None),
                     None) for b in item.batches or (1,) if b not in item.skip]
        self.prefetch(upcoming)
        try:
            batches = list(item.batches or (1,))
            rng = random.Random(item.seed)
            oom_at = None
            i = 0
            while i < len(batches):
                batch = batches[i]
                i += 1
                if batch in item.skip:
                    continue
                if deadline is not None and time.time() > deadline:
                    break
                graph = None
                rec: dict[str, Any]
                if oom_at is not None and batch > oom_at:
                    rec = {"status": "oom", "error": f"not run: batch {oom_at} ran out of memory",
                           "oom_masked_by": oom_at}
                else:
                    try:
                        graph = extract(path, batch=batch)
                    except Exception as exc:  # noqa: BLE001 - recorded as a failed config
                        rec = {"status": "error", "error": f"extract: {exc}"}
                    else:
                        rec = self._measure(path, item, batch, deadline)
                if deadline is not None and time.time() > deadline and rec.get("status") == "error" \
                        and "timeout" in str(rec.get("error") or "").lower():
                    break  # cut by the campaign's time budget, not the model's fault: not recorded
                if rec.get("status") == "oom" and oom_at is None:
                    oom_at = batch
                out.append((self._record(item, batch, rec, graph), graph))
                if item.batches is None and batch == 1 and rec.get("status") == "ok":
                    t = TIME[self.target.kind]
                    batches += pick_batches(rec[f"{t}_ms"], rng, item.per_arch, hi_ms=item.max_ms)
        finally:
            if item.reference:
                self._keep.add(item.arch_id)  # re-measured through the campaign
            for arch_id in list(self._exports):  # all but the next and the references
                if arch_id not in self._keep and (upcoming is None or arch_id != upcoming.arch_id):
                    self._drop_export(arch_id)
        return out

    def _record(self, item: Item, batch: int, rec: dict, graph) -> dict:
        kind = self.target.kind
        t = TIME[kind]
        status = rec.get("status", "error")
        metrics = {k: rec[k] for k in METRICS[kind] if status == "ok" and rec.get(k) is not None}
        quality = {k.format(t=t): rec[k.format(t=t)] for k in QUALITY if k.format(t=t) in rec}
        cv = rec.get(f"{t}_robust_cv")
        quality["remeasured"] = bool(rec.get("remeasured"))
        quality["noisy"] = bool(status == "ok" and cv is not None and cv > self.noisy_cv)
        if rec.get("oom_masked_by") is not None:
            quality["oom_masked_by"] = rec["oom_masked_by"]
        g = graph.globals if graph is not None else {}
        return {
            "kind": kind, "target": self.spec.name, "arch_id": item.arch_id,
            "family": item.family, "group": item.group, "spec": item.spec,
            "config": item.config, "batch": batch,
            "device": self.spec.device_name, "status": status, "error": rec.get("error"),
            "metrics": metrics, "quality": quality,
            "flops": g.get("flops_total"), "params": g.get("params_total"),
            "nodes": g.get("num_nodes"),
            "provider": {k: rec.get(k) for k in ("provider_requested", "provider_used",
                                                 "provider_options", "threads")},
            "input_shapes": rec.get("input_shapes"),
            "split_arch": split_arch(item.arch_id),
            "split_family": split_family(item.arch_id, item.family),
            "split_real": split_real(item.arch_id, item.family, item.group),
            "graph_key": graph_key(item.family, item.arch_id, batch) if graph is not None else None,
            "reference": item.reference, "env": self.target.env(),
            "settings": self.spec.settings,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            # the machine's 1/5/15-min load when the record was written: load on the
            # other core slows the measuring one (up to ~45 % seen on a 2-vCPU VM)
            "host_loadavg": list(os.getloadavg()),
        }

    def close(self) -> None:
        """Stop the export process and the measuring child; remove the exports."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.target.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
