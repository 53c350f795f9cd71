"""Put the records a GPU window returned into the repository's data.

    python -m training.campaigns.gpu_window ingest FILES_AT [--data data/gpu]

Layout (a dataset folder per GPU and setting, the layout of ``data/public-gpu``)::

    data/gpu/<gpu>/<mode>-<precision>[-<layout>][-<optimizer>]/records/part-NNNNN.jsonl
    data/gpu/<gpu>/<mode>-<precision>[-<layout>][-<optimizer>]/campaign.json
    data/gpu/<gpu>/runs/<run_id>/window.json, archs.jsonl   what each run said about itself
    data/gpu/<gpu>/README.md                                the data card (regenerated)

``<gpu>`` is the records' ``device`` (the shipped spec sheet's key, e.g.
``h100-sxm``). Every record keeps its environment, method and provenance.
Re-ingesting the same folder adds nothing (records are keyed by
``record_id``); a torn last line (a call cut off mid-write) is skipped and
counted; records of injected failures (dry runs) are never ingested. Records
of a CPU dry run are refused unless ``--dry-run`` and an explicit ``--data``
(never ``data/gpu``) are given.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from training.campaigns.gpu_window.shards import iter_shard_files, read_lines, write_json_atomic

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "data" / "gpu"
PART = "part-{:05d}.jsonl"


def setup_folder(rec: dict[str, Any]) -> str:
    """``<mode>-<precision>[-<layout>][-<optimizer>]`` of a record (no layout for
    token inputs, whose layout is ``n/a``)."""
    s = rec["setup"]
    layout = f"-{s['layout']}" if s["layout"] != "n/a" else ""
    opt = f"-{s['optimizer']}" if s.get("optimizer") else ""
    return f"{s['mode']}-{s['precision']}{layout}{opt}"


def _existing_ids(folder: Path) -> tuple[set[str], int]:
    ids: set[str] = set()
    last = -1
    for p in sorted((folder / "records").glob("part-*.jsonl")):
        last = max(last, int(p.stem.split("-")[1]))
        recs, _ = read_lines(p)
        ids.update(str(r.get("record_id")) for r in recs)
    return ids, last


def _write_part(folder: Path, number: int, recs: list[dict[str, Any]]) -> Path:
    path = folder / "records" / PART.format(number)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in recs))
    tmp.replace(path)
    return path


def read_source(src: Path) -> tuple[list[dict[str, Any]], int]:
    """Every record in the shards at or under ``src`` and the torn lines skipped."""
    files = list(iter_shard_files(src))
    if not files:
        raise FileNotFoundError(f"no records-NN.jsonl at or under {src}: pass the folder the device "
                                "call returned (its files_at)")
    recs, torn = [], 0
    for f in files:
        r, t = read_lines(f)
        recs.extend(r)
        torn += t
    return recs, torn


def ingest(src: Path, data: Path | None = None, allow_dry_run: bool = False) -> dict[str, Any]:
    """Ingest ``src`` into ``data`` (default ``data/gpu``); returns what was done."""
    recs, torn = read_source(src)
    dry = [r for r in recs if (r.get("provenance") or {}).get("dry_run") or r.get("device") == "cpu"]
    if dry and not allow_dry_run:
        raise ValueError(f"{len(dry)} of {len(recs)} records in {src} come from a dry run (CPU): "
                         "they are not GPU measurements; only tests ingest them (--dry-run --data DIR)")
    if allow_dry_run and data is None:
        raise ValueError("--dry-run needs --data DIR: dry-run records never go to data/gpu")
    root = data if data is not None else DATA
    skipped: Counter[str] = Counter()
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        if (r.get("quality") or {}).get("injected"):
            skipped["injected failure (dry run)"] += 1
            continue
        groups[(r["device"], setup_folder(r))].append(r)
    added: dict[str, int] = {}
    for (device, setup), rs in sorted(groups.items()):
        folder = root / device / setup
        ids, last = _existing_ids(folder)
        new = [r for r in rs if str(r.get("record_id")) not in ids]
        skipped["already ingested"] += len(rs) - len(new)
        if new:
            _write_part(folder, last + 1, sorted(new, key=lambda r: (r["measured_at"], r["key"])))
            _campaign_json(folder)
        added[f"{device}/{setup}"] = len(new)
    for device in sorted({d for d, _ in groups}):
        _keep_run_files(src, root / device)
        write_card(root / device)
    return {"source": str(src), "records": len(recs), "torn_lines": torn, "added": added,
            "skipped": dict(skipped), "data": str(root)}


def _keep_run_files(src: Path, device_dir: Path) -> None:
    """Copy each run's window.json / archs.jsonl to ``runs/<run_id>/``."""
    for w in sorted(src.rglob("window.json")):
        procs = json.loads(w.read_text()).get("processes", [])
        if not procs:
            continue
        run_id = str(procs[0]["run"]["run_id"]).replace(":", "")
        dest = device_dir / "runs" / run_id
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(w, dest / "window.json")
        if (w.parent / "archs.jsonl").is_file():
            shutil.copyfile(w.parent / "archs.jsonl", dest / "archs.jsonl")


def _folder_records(folder: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in sorted((folder / "records").glob("part-*.jsonl")):
        out.extend(read_lines(p)[0])
    return out


def _campaign_json(folder: Path) -> None:
    recs = _folder_records(folder)
    status = Counter(r["status"] for r in recs)
    write_json_atomic(folder / "campaign.json", {
        "settings": {"source": recs[0]["provenance"]["source"], "setup": recs[0]["setup"],
                     "device": recs[0]["device"], "gpu_name": recs[0]["env"].get("gpu_name")},
        "state": "measured", "configurations": len(recs), "status": dict(status),
        "runs": sorted({r["provenance"]["run_id"] for r in recs})})


def write_card(device_dir: Path) -> Path:
    """The data card of one GPU's records (regenerated from the records)."""
    rows, envs, runs = [], {}, set()
    for folder in sorted(p for p in device_dir.iterdir() if (p / "records").is_dir()):
        recs = _folder_records(folder)
        st = Counter(r["status"] for r in recs)
        energy = sum(1 for r in recs if r["status"] == "ok" and r["metrics"].get("energy_mj") is not None)
        archs = len({r["arch_id"] for r in recs})
        rows.append(f"| `{folder.name}` | {len(recs)} | {st.get('ok', 0)} | {st.get('oom', 0)} | "
                    f"{st.get('error', 0)} | {energy} | {archs} |")
        for r in recs:
            envs[r["provenance"]["run_id"]] = r["env"]
            runs.add(r["provenance"]["run_id"])
    env_lines = []
    for run_id, env in sorted(envs.items()):
        env_lines.append(
            f"- `{run_id}`: {env.get('gpu_name')}, driver {env.get('gpu_driver')}, CUDA {env.get('cuda_version')}, "
            f"power limit {env.get('gpu_power_limit_w')} W, max SM clock {env.get('gpu_max_sm_clock_mhz')} MHz; "
            f"torch {env.get('torch_version')} (CUDA {env.get('torch_cuda_version')}, cuDNN "
            f"{env.get('cudnn_version')}), timm {env.get('timm_version')}, transformers "
            f"{env.get('transformers_version')}, nvidia-ml-py {env.get('nvidia_ml_py_version')}")
    text = f"""# Our own GPU measurements: `{device_dir.name}` (measured by us)

Measured by us with `bash training/campaigns/gpu_window.sh` (one call on a lent GPU machine;
`training/campaigns/README.md`), PyTorch eager, models rebuilt in-process from their configs
(timm, Hugging Face transformers, the zoo's generated families). Every record carries its
environment (`env`), its method (`quality`, `setup`) and its provenance (`provenance`:
commit, code hash, run id); the fields are documented in
`training/campaigns/gpu_window/record.py`. Regenerated by
`python -m training.campaigns.gpu_window ingest FILES_AT`.

| setting (`<mode>-<precision>[-<layout>][-<optimizer>]`) | records | ok | oom | error | with energy | architectures |
| --- | ---: | ---: | ---: | ---: | ---: | ---: |
{chr(10).join(rows)}

## Runs and their environment

{chr(10).join(env_lines)}

`runs/<run_id>/window.json` holds each run's full environment, its timing settings, the
energy counter's measured tick and its counts; `archs.jsonl` how each architecture was built.

## Method (in short)

Median over CUDA-event-timed steps after warm-up (time-only configurations: 5 to 15 steps;
energy configurations: a 1 s window) with CV and robust CV; peak memory from NVML (process)
and torch (`max_memory_allocated` / `max_memory_reserved`); utilization (NVML
`utilization.gpu`, per-process SM utilization, GPM SM activity / occupancy on Hopper) and
energy (NVML total-energy counter) over the window; out-of-memory is a label
(`status: "oom"`, larger batches of the same setting masked: `quality.oom_masked_by`).
Full method: `training/campaigns/gpu_window/measure.py`.
"""
    path = device_dir / "README.md"
    path.write_text(text)
    return path
