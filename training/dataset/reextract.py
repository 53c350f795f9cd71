"""Re-extract stored graphs of a dataset folder with the current extractor.

A dataset's PerfGraphs are what the extractor made when each configuration
was measured; the measurements do not depend on it, the features do. When
an extractor fix changes the features of some models, their graphs are
re-made here: each architecture is exported again from its record's config
(``training.zoo``, random weights: the same graph), extracted at every batch
size the folder holds for it, and the graph shards are rewritten atomically
with the new graphs (every other graph byte for byte as it was). Records
are not touched; ``graphs/reextracted.json`` lists what was re-made, when,
by which perfseer-rt and why, and a graph whose node or edge arrays came out
different is named there (only the globals are expected to move).

    python -m training.dataset.reextract --dataset data/cpu-amd-epyc-1t/inference \\
        --weights-vary --why "shape-derived constants are not weights"

``--weights-vary`` picks the architectures whose stored ``weight_total``
differs by more than 1 % between their batch sizes in this folder (weights
never depend on the batch: such a graph counted something else as weights);
``--arch-ids`` names them (architectures the folder lacks are skipped).
Progress on stderr (tqdm); a rerun re-makes them again (idempotent).
"""

from __future__ import annotations

import argparse
import datetime
import json
import tempfile
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

import numpy as np
from tqdm import tqdm

import perfseer_rt
from perfseer_rt import extract
from perfseer_rt.graph import layout
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.seernet.data import read_graph_shard, read_records, write_graph_shard
from training.zoo import export_onnx, parse_spec

WEIGHT = layout.GLOBAL_COLUMNS.index("weight_total")
#: Relative spread of ``weight_total`` over an architecture's batch sizes
#: above which ``--weights-vary`` re-extracts it.
VARY = 0.01


def varying_weights(graphs: dict[str, tuple[np.ndarray, ...]], records: Sequence[dict]) -> list[str]:
    """Architectures (``arch_id``) whose stored ``weight_total`` differs by
    more than :data:`VARY` between the batch sizes of their graphs."""
    by_arch: dict[str, list[float]] = defaultdict(list)
    for r in records:
        g = graphs.get(r.get("graph_key", ""))
        if g is not None:
            by_arch[r["arch_id"]].append(float(g[3].reshape(-1)[WEIGHT]))
    return sorted(a for a, w in by_arch.items() if max(w) - min(w) > VARY * max(w))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m training.dataset.reextract", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True, type=Path)
    pick = ap.add_mutually_exclusive_group(required=True)
    pick.add_argument("--arch-ids", nargs="+")
    pick.add_argument("--weights-vary", action="store_true")
    ap.add_argument("--why", required=True, help="the extractor change, for reextracted.json")
    args = ap.parse_args(argv)

    shards = sorted((args.dataset / "graphs").glob("*.npz"))
    stored = {path: read_graph_shard(path) for path in shards}
    graphs = {k: g for per in stored.values() for k, g in per.items()}
    records = [r for r in read_records(args.dataset) if r.get("graph_key") in graphs]
    arch_ids = varying_weights(graphs, records) if args.weights_vary else list(args.arch_ids)
    keys_of: dict[str, dict[str, int]] = defaultdict(dict)  # arch -> graph_key -> batch
    spec_of: dict[str, str] = {}
    for r in records:
        if r["arch_id"] in arch_ids:
            keys_of[r["arch_id"]][r["graph_key"]] = int(r["batch"])
            spec_of[r["arch_id"]] = r["spec"]
    fresh: dict[str, tuple[np.ndarray, ...]] = {}
    structure_changed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="perfseer-reextract-") as tmp:
        for arch in tqdm(sorted(keys_of), desc="re-extract", unit="arch"):
            path = str(Path(tmp) / f"{arch}.onnx")
            export_onnx(parse_spec(spec_of[arch]), path)
            for key, batch in sorted(keys_of[arch].items()):
                g = extract(path, batch=batch)
                new = (np.asarray(g.x), np.asarray(g.edge_index, np.int64),
                       np.asarray(g.edge_attr).reshape(-1, len(layout.EDGE_COLUMNS)), np.asarray(g.u))
                old = graphs[key]
                if any(a.shape != b.shape or not np.allclose(a, b, rtol=1e-5) for a, b in zip(old[:3], new[:3])):
                    structure_changed.append(key)
                fresh[key] = new
            Path(path).unlink()
            Path(path + ".data").unlink(missing_ok=True)
    for path, per in stored.items():
        if fresh.keys().isdisjoint(per):
            continue
        keys = list(per)
        write_graph_shard(path, keys, [_arrays(*(fresh.get(k) or per[k])) for k in keys])
    log = args.dataset / "graphs" / "reextracted.json"
    done = json.loads(log.read_text()) if log.exists() else []
    done.append({"date": datetime.date.today().isoformat(), "perfseer_rt": perfseer_rt.__version__,
                 "why": args.why, "architectures": {a: spec_of[a] for a in sorted(keys_of)},
                 "graphs": sorted(fresh), "node_or_edge_arrays_changed": sorted(structure_changed)})
    atomic_write_bytes(log, (json.dumps(done, indent=1) + "\n").encode())
    print(f"re-extracted {len(fresh)} graphs of {len(keys_of)} architectures; "
          f"{len(structure_changed)} with other node or edge arrays")


def _arrays(x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray, u: np.ndarray) -> SimpleNamespace:
    """One graph as :func:`write_graph_shard` reads it."""
    return SimpleNamespace(x=x, edge_index=edge_index, edge_attr=edge_attr, u=u.reshape(-1))


if __name__ == "__main__":
    main()
