"""What the GPU campaigns share: the plan, the record stream, resume, budget, drift.

- :func:`plan_archs`: a deterministic list of architectures (zoo configs)
  with their batch sizes, from a seed; the same arguments give the same plan,
  so a campaign cut off at a command's limit continues where it stopped.
- :class:`RecordWriter`: appends one JSON line per record and flushes (and
  fsyncs) after every record, so a command killed at its limit still returns
  every record it finished.
- :func:`load_done`: keys of records already measured (``--resume``).
- :class:`Budget`: stops cleanly before ``--time-budget`` runs out.
- :func:`run_campaign`: the loop: skip what is done, measure, re-measure
  noisy records once, re-measure the reference set every N records (tagged
  ``reference: true``) to catch drift, and write everything as it goes.

The zoo is imported lazily (:func:`load_zoo`), by module name, so a campaign
can run against a stand-in zoo in tests.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import importlib
import json
import os
import random
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

#: batch sizes of the campaigns (DESIGN.md section 4: 1..256)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: families and their share of the plan: PerfSeer space, classic, transformers
FAMILY_WEIGHTS = {
    "perfseer": 8, "resnet": 1, "vgg": 1, "mobilenetv2": 1, "mobilenetv3": 1, "densenet": 1,
    "efficientnet": 1, "googlenet": 1, "vit": 1, "bert": 1, "gpt": 1,
}
CV_MAX = 0.03          # a record with latency CV above this is re-measured once
MEASURE_TIMEOUT_S = 600.0  # one measurement's limit when the budget is not closer
STOP = object()        # what ``prepare`` returns when the budget ran out while waiting
MAX_FILE_BYTES = 15 << 20  # the GPU machine returns files of at most 16 MiB


def log(msg: str, stream=None) -> None:
    """One timestamped progress line on stderr (and ``stream`` when given)."""
    line = f"[{dt.datetime.now(dt.timezone.utc).strftime('%H:%M:%S')}] {msg}"
    print(line, file=sys.stderr, flush=True)
    if stream is not None:
        stream.write(line + "\n")
        stream.flush()


def load_zoo(name: str = "training.zoo"):
    """Import the zoo module (``training.zoo`` or a stand-in with the same API)."""
    return importlib.import_module(name)


# ------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Case:
    """One configuration to measure: an architecture at one batch size.

    ``key`` (``"<arch_id>/b<batch>"``) identifies it across commands.
    """

    arch_id: str
    family: str
    batch: int
    config: dict
    spec: str | None = None

    @property
    def key(self) -> str:
        return f"{self.arch_id}/b{self.batch}"


@dataclass
class Arch:
    """An architecture and the cases (batch sizes) planned for it."""

    arch_id: str
    family: str
    config: dict
    spec: str | None
    cases: list[Case] = field(default_factory=list)


def _arch(zoo, cfg, batches: Sequence[int]) -> Arch:
    config = cfg.with_batch(None).to_dict(include_arch_id=True)
    spec = zoo.to_spec(cfg) if hasattr(zoo, "to_spec") else None
    arch = Arch(cfg.arch_id, cfg.family, config, spec)
    arch.cases = [Case(cfg.arch_id, cfg.family, int(b), config, spec) for b in batches]
    return arch


def plan_archs(zoo, *, seed: int, count: int, families: Sequence[str] | None = None,
               batches: Sequence[int] = BATCHES, batches_per_arch: int = 3,
               perfseer_res: int = 224, specs: Sequence[str] = ()) -> list[Arch]:
    """A deterministic list of ``count`` sampled architectures (plus ``specs``).

    Families are drawn by :data:`FAMILY_WEIGHTS` from ``random.Random(seed)``;
    each family samples from its own ``random.Random(f"{seed}:{family}")`` so
    adding a family does not change the others' configs. The PerfSeer space
    is fixed to ``perfseer_res`` x ``perfseer_res`` inputs. Each architecture
    gets ``batches_per_arch`` distinct batch sizes from ``batches``. A family
    the zoo cannot build yet is skipped with a message. ``specs`` (zoo spec
    strings) come first, with their batch sizes drawn the same way.
    """
    families = list(families or FAMILY_WEIGHTS)
    usable = []
    for fam in families:
        try:
            zoo.get_family(fam)
            usable.append(fam)
        except Exception as exc:  # family module not written yet, or unknown
            log(f"plan: skipping family {fam!r}: {type(exc).__name__}: {exc}")
    pick = random.Random(seed)
    batch_rng = random.Random(f"{seed}:batches")
    fam_rngs = {f: random.Random(f"{seed}:{f}") for f in usable}
    k = min(batches_per_arch, len(batches))
    archs: list[Arch] = []
    seen: set[str] = set()
    for text in specs:
        cfg = zoo.parse_spec(text)
        chosen = sorted(batch_rng.sample(list(batches), k))
        archs.append(_arch(zoo, cfg, chosen))
        seen.add(cfg.arch_id)
    if not usable:
        return archs
    weights = [FAMILY_WEIGHTS.get(f, 1) for f in usable]
    attempts = 0
    while len(archs) < count + len(specs) and attempts < 20 * (count + 1):
        attempts += 1
        fam = pick.choices(usable, weights)[0]
        cfg = zoo.sample(fam, fam_rngs[fam])
        if fam == "perfseer" and "res" in cfg.params and cfg.params["res"] != perfseer_res:
            cfg = zoo.ModelConfig(fam, {**cfg.params, "res": perfseer_res})
        chosen = sorted(batch_rng.sample(list(batches), k))
        if cfg.arch_id in seen:
            continue
        seen.add(cfg.arch_id)
        archs.append(_arch(zoo, cfg, chosen))
    return archs


# ------------------------------------------------------------ records on disk
def utc_stamp() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


class RecordWriter:
    """Append JSON lines to ``<out>/<prefix>-<stamp>[-partN].jsonl``, flushed per record.

    A new part starts before a file would pass :data:`MAX_FILE_BYTES`.
    """

    def __init__(self, out_dir: str, prefix: str, stamp: str | None = None) -> None:
        os.makedirs(out_dir, exist_ok=True)
        self.out_dir, self.prefix = out_dir, prefix
        self.stamp = stamp or utc_stamp()
        self.part = 0
        self.count = 0
        self._open()

    def _open(self) -> None:
        suffix = f"-part{self.part}" if self.part else ""
        self.path = os.path.join(self.out_dir, f"{self.prefix}-{self.stamp}{suffix}.jsonl")
        self._f = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        line = json.dumps(record, separators=(",", ":"), allow_nan=False, default=str) + "\n"
        if self._f.tell() + len(line) > MAX_FILE_BYTES:
            self._f.close()
            self.part += 1
            self._open()
        self._f.write(line)
        self._f.flush()
        os.fsync(self._f.fileno())
        self.count += 1

    def close(self) -> None:
        self._f.close()


def iter_records(paths: Iterable[str]) -> Iterable[dict]:
    """Records from JSONL files or folders of them (a torn last line is skipped)."""
    files: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(glob.glob(os.path.join(p, "**", "*.jsonl"), recursive=True))
        elif os.path.isfile(p):
            files.append(p)
    for path in files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut off when a command was killed


def load_done(paths: Iterable[str], campaign: str, retry_errors: bool = False) -> set[str]:
    """Keys of records of ``campaign`` already written (reference re-measures excluded).

    ``retry_errors``: records with status ``"error"`` do not count as done.
    """
    done = set()
    for rec in iter_records(paths):
        if rec.get("campaign") != campaign or rec.get("reference") or "key" not in rec:
            continue
        if retry_errors and rec.get("status") == "error":
            continue
        done.add(rec["key"])
    return done


def device_slug(env: dict, provider: str, threads: int | None = None) -> str:
    """``nvidia-h100-80gb-hbm3`` for a GPU, ``cpu-<threads>t`` for the CPU."""
    if provider == "cuda" and env.get("gpu_name"):
        return re.sub(r"[^a-z0-9]+", "-", env["gpu_name"].lower()).strip("-")
    return f"cpu-{threads or 1}t"


# -------------------------------------------------------------------- budget
class Budget:
    """Wall-clock budget: ``fits()`` says whether one more measurement can finish.

    The estimate of the next measurement is the largest of the last 20 (at
    least ``floor_s``), times 1.5.
    """

    def __init__(self, seconds: float | None, floor_s: float = 5.0) -> None:
        self.seconds = seconds
        self.t0 = time.monotonic()
        self.floor_s = floor_s
        self.recent: list[float] = []

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return float("inf") if self.seconds is None else self.seconds - self.elapsed()

    def add(self, seconds: float) -> None:
        self.recent = (self.recent + [seconds])[-20:]

    def fits(self) -> bool:
        need = 1.5 * max([self.floor_s] + self.recent)
        return self.left() > need


# ------------------------------------------------------------------ the loop
Measure = Callable[[Case, Any, float], dict]


@dataclass
class CampaignStats:
    written: int = 0
    ok: int = 0
    oom: int = 0
    error: int = 0
    noisy: int = 0
    remeasured: int = 0
    reference: int = 0
    skipped_done: int = 0
    stopped_by_budget: bool = False

    def add(self, rec: dict) -> None:
        self.written += 1
        if rec.get("reference"):
            self.reference += 1
            return
        status = rec.get("status")
        if status in ("ok", "oom", "error"):
            setattr(self, status, getattr(self, status) + 1)
        self.noisy += bool(rec.get("noisy"))
        self.remeasured += bool(rec.get("remeasured"))


def run_campaign(archs: Sequence[Arch], *, campaign: str, measure: Measure,
                 prepare: Callable[[int], Any], release: Callable[[int, bool], None],
                 finish: Callable[[dict, Case], dict], writer: RecordWriter, budget: Budget,
                 done: set[str], reference_count: int = 3, reference_every: int = 100,
                 cv_key: str = "latency_cv", cv_max: float = CV_MAX,
                 logf=None) -> CampaignStats:
    """Measure every planned case not in ``done``, streaming records.

    Args:
        archs: the plan.
        measure: ``(case, prepared, timeout_s) -> record``.
        prepare: ``arch index -> prepared`` (e.g. waits for its ONNX export);
            may return a failure record (a dict with ``status``) instead, or
            :data:`STOP` when the budget ran out while it waited.
        release: ``(arch index, keep)`` frees what prepare made (``keep``:
            it is a reference architecture, still needed).
        finish: ``(record, case) -> record`` adds the campaign fields.
        reference_count: the first N architectures (their first case) form
            the reference set, re-measured every ``reference_every`` records.
        cv_key / cv_max: the noise criterion (re-measure once above it).
    """
    stats = CampaignStats()
    refs = list(range(min(reference_count, len(archs))))
    since_ref = 0
    prepared_refs: dict[int, Any] = {}

    def one(case: Case, prepared: Any, reference: bool) -> dict | None:
        """Measure (and re-measure if noisy), write; None when the budget cut it short."""
        t0 = time.monotonic()
        limit = budget.left() - 5.0
        timeout = min(MEASURE_TIMEOUT_S, max(5.0, limit))
        cut_by_budget = limit < MEASURE_TIMEOUT_S
        if isinstance(prepared, dict) and "status" in prepared:  # preparation failed
            rec = dict(prepared)
        else:
            rec = measure(case, prepared, timeout)
            if rec.get("status") == "ok" and (rec.get(cv_key) or 0) > cv_max and budget.fits():
                first_cv = rec.get(cv_key)
                again = measure(case, prepared, timeout)
                if again.get("status") == "ok":
                    rec = again
                    rec["remeasured"] = True
                    rec["first_cv"] = first_cv
            rec.setdefault("remeasured", False)
            rec["noisy"] = rec.get("status") == "ok" and (rec.get(cv_key) or 0) > cv_max
        if cut_by_budget and str(rec.get("error") or "").startswith("timeout"):
            return None  # not the model's fault: the command's time ran out
        rec["reference"] = reference
        rec = finish(rec, case)
        writer.write(rec)
        stats.add(rec)
        budget.add(time.monotonic() - t0)
        return rec

    def measure_refs() -> bool:
        """Re-measure the reference set; False when the budget ran out."""
        for i in refs:
            if not budget.fits():
                return False
            if i not in prepared_refs:
                prepared_refs[i] = prepare(i)
            if prepared_refs[i] is STOP:
                return False
            rec = one(archs[i].cases[0], prepared_refs[i], reference=True)
            if rec is None:
                return False
            log(f"reference {archs[i].cases[0].key} {rec.get('status')} "
                f"{_headline(rec)}", logf)
        return True

    for i, arch in enumerate(archs):
        todo = [c for c in arch.cases if c.key not in done]
        stats.skipped_done += len(arch.cases) - len(todo)
        if not todo:
            continue
        if not budget.fits():
            stats.stopped_by_budget = True
            break
        prepared = prepared_refs[i] if i in prepared_refs else prepare(i)
        if prepared is STOP:
            stats.stopped_by_budget = True
            break
        if i in refs:
            prepared_refs[i] = prepared
        for case in todo:
            rec = one(case, prepared, reference=False) if budget.fits() else None
            if rec is None:
                stats.stopped_by_budget = True
                break
            done.add(case.key)
            since_ref += 1
            log(f"{stats.written:5d} {case.family:12s} {case.key} {rec.get('status'):5s} "
                f"{_headline(rec)}", logf)
            if reference_every and since_ref >= reference_every:
                since_ref = 0
                if not measure_refs():
                    stats.stopped_by_budget = True
                    break
        if i not in refs:
            release(i, False)
        if stats.stopped_by_budget:
            break
    if since_ref and refs and not stats.stopped_by_budget:
        measure_refs()  # close the run with the reference set
    for i in prepared_refs:
        release(i, False)
    return stats



def report_summary(campaign: str, stats: CampaignStats, budget: Budget, writer: RecordWriter,
                   device: str, logf=None) -> dict:
    """Log and print (one JSON line on stdout) a finished campaign's counts and rate."""
    minutes = budget.elapsed() / 60
    summary = {"campaign": campaign, "records": stats.written, "ok": stats.ok,
               "oom": stats.oom, "error": stats.error, "noisy": stats.noisy,
               "remeasured": stats.remeasured, "reference": stats.reference,
               "skipped_done": stats.skipped_done, "stopped_by_budget": stats.stopped_by_budget,
               "elapsed_s": round(budget.elapsed(), 1),
               "configs_per_minute": round((stats.ok + stats.oom + stats.error) / minutes, 2)
               if minutes > 0 else None, "records_file": writer.path, "device": device}
    log("summary " + json.dumps(summary), logf)
    print(json.dumps(summary))
    return summary

def _headline(rec: dict) -> str:
    for key in ("latency_ms", "step_ms"):
        if rec.get(key) is not None:
            cv = rec.get(key.replace("_ms", "_cv"))
            return (f"{key}={rec[key]:.3f} cv={cv:.3f} mem={rec.get('peak_mem_mb') or 0:.0f}MiB"
                    + (" NOISY" if rec.get("noisy") else ""))
    return (rec.get("error") or "")[:120]


# ------------------------------------------------------------- command line
def add_common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="output folder ($OUT on the GPU machine)")
    p.add_argument("--seed", type=int, default=0, help="plan seed (same seed, same plan)")
    p.add_argument("--count", type=int, default=2000, help="architectures to sample")
    p.add_argument("--families", default=None,
                   help="comma-separated zoo families (default: all of FAMILY_WEIGHTS)")
    p.add_argument("--spec", action="append", default=[],
                   help="an explicit zoo spec measured first (repeatable)")
    p.add_argument("--batches", default=",".join(map(str, BATCHES)),
                   help="comma-separated batch sizes to draw from")
    p.add_argument("--batches-per-arch", type=int, default=3)
    p.add_argument("--resume", action="append", nargs="?", const=None, default=[],
                   metavar="PATH",
                   help="skip configs already recorded: the --out folder is always read; "
                        "PATH adds JSONL files/folders from earlier commands (repeatable)")
    p.add_argument("--retry-errors", action="store_true",
                   help="measure again configs whose earlier record has status error")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="stop cleanly before this many seconds have passed")
    p.add_argument("--reference-count", type=int, default=3)
    p.add_argument("--reference-every", type=int, default=100)
    p.add_argument("--cv-max", type=float, default=CV_MAX)
    p.add_argument("--zoo", default="training.zoo", help="zoo module (tests use a stand-in)")
    p.add_argument("--dry-run", action="store_true",
                   help="CPU only, tiny budgets: the whole pipeline, testable without a GPU")


def parse_list(text: str | None, cast=str) -> list:
    return [cast(x) for x in text.split(",") if x.strip()] if text else []
