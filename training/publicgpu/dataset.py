"""Write published records as campaign dataset folders, and read them back.

Layout (the campaign engine's, :mod:`training.campaign.store`)::

    data/public-gpu/<source>/<gpu>/<setup>/records/part-00000.jsonl
    data/public-gpu/<source>/<gpu>/<setup>/campaign.json

one folder per published file family (one GPU, one setup), so a folder's
records share a GPU and a method as a campaign folder's do. There is no
``graphs/`` folder: the PerfGraphs come from the ONNX rebuilds
(:mod:`training.publicgpu.exports`), whose path each record names.
``records`` regenerates a source's folders from scratch (the same input gives
byte-identical files).
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Iterator

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.campaign.store import dataset_folders, iter_records

REPO = Path(__file__).resolve().parents[2]
#: Where published (others') GPU records live; our own go to data/gpu/.
ROOT = REPO / "data" / "public-gpu"


def write_folders(out: Path, folders: dict[str, list[dict]], settings: dict) -> dict[str, int]:
    """Replace ``out``'s dataset folders by ``folders`` (relative name -> records).

    Each gets ``records/part-00000.jsonl`` (records sorted by file and line)
    and ``campaign.json`` (``settings`` plus the folder's count). Dataset
    folders under ``out`` that are not in ``folders`` are removed; anything
    else there (the data card, the export log) is left alone.
    """
    for old in dataset_folders([out]) if out.exists() else []:
        if str(old.relative_to(out)) not in folders:
            shutil.rmtree(old)
    counts = {}
    for name, records in sorted(folders.items()):
        folder = out / name
        (folder / "records").mkdir(parents=True, exist_ok=True)
        for stale in (folder / "records").glob("*.jsonl"):
            if stale.name != "part-00000.jsonl":
                stale.unlink()
        records = sorted(records, key=lambda r: (r["provenance"]["file"], r["provenance"]["line"]))
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
        atomic_write_bytes(folder / "records" / "part-00000.jsonl", text.encode())
        doc = {"settings": settings, "state": "published", "configurations": len(records)}
        atomic_write_bytes(folder / "campaign.json", (json.dumps(doc, indent=2) + "\n").encode())
        counts[name] = len(records)
    return counts


def group_by_folder(records: Iterable[dict], folder_of) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        out[folder_of(r)].append(r)
    return dict(out)


def read(root: Path = ROOT) -> Iterator[dict]:
    """Every record under ``root`` (all sources), folder by folder."""
    for folder in dataset_folders([root]):
        yield from iter_records(folder)
